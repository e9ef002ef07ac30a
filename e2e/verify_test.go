package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/verify"
)

// verifyReport is `mm2go verify --json`'s output.
type verifyReport struct {
	OK      bool    `json:"ok"`
	Seconds float64 `json:"elapsed_seconds"`
	verify.Report
}

// runVerify runs `mm2go verify --json` on the flow of cfg and returns its
// exit code and report.
func runVerify(t *testing.T, cfg string, extra ...string) (int, verifyReport) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"verify", "-c", cfg, "--json", "--timeout", "90s"}, extra...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("mm2go verify: %v", err)
	}
	var rep verifyReport
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), "mm2go verify exited %d: %s%s", code, stdout.String(), stderr.String())
	t.Logf("mm2go verify exited %d in %.1f s: totals %+v", code, rep.Seconds, rep.Totals)
	return code, rep
}

// TestIntegrationVerify runs `mm2go verify` on real Kafka: on a flow's copy
// while it runs and after it stopped (everything matched), on a copy made
// by hand with a record deleted, one duplicated, a header changed and a
// value changed (each reported at its offset), and on a compacted source
// topic whose cleaner ran after the copy (explained, not loss).
func TestIntegrationVerify(t *testing.T) {
	beside(t)
	t.Run("copy", func(t *testing.T) {
		e := newEnv(t)
		topic := e.topic("v")
		e.createTopic(topic, 3, nil)
		seq := 0
		produceN(t, e.srcCl, []string{topic}, 3, 3000, &seq)
		cfg := e.config()
		mm := e.start(mmArgs(cfg)...)
		eventually(t, time.Minute, "the backlog copied and in the offset map", func() bool {
			code, rep := runVerify(t, cfg)
			require.Zero(t, code)
			return rep.Totals.Matched == 3000
		})

		// While the flow runs and a producer writes: what the map has
		// recorded matches, the rest is explained.
		stop := make(chan struct{})
		done := make(chan error)
		go func() {
			n := seq
			for {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				if _, err := produce(e.srcCl, []string{topic}, 3, 30, &n); err != nil {
					done <- err
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		code, rep := runVerify(t, cfg)
		close(stop)
		require.NoError(t, <-done)
		require.Zero(t, code, "verify of a running flow")
		require.True(t, rep.OK)
		require.GreaterOrEqual(t, rep.Totals.Matched, int64(3000), "what the offset map has recorded (it follows the copy a flush later)")
		require.Len(t, rep.Partitions, 3)

		eventually(t, time.Minute, "the traffic copied", func() bool {
			return records(t, e.dstAdm, e.remote(topic)) >= records(t, e.srcAdm, topic)
		})
		require.Zero(t, mm.stop(t, syscall.SIGTERM, 30*time.Second))
		code, rep = runVerify(t, cfg)
		require.Zero(t, code)
		require.Equal(t, records(t, e.srcAdm, topic), rep.Totals.Matched, "every source record matched once the flow stopped")
		require.Zero(t, rep.Totals.NotCopied+rep.Totals.AfterMap+rep.Totals.BeforeMap, "nothing left to explain after a clean stop")
	})

	t.Run("follow", func(t *testing.T) {
		e := newEnv(t)
		topic := e.topic("f")
		e.createTopic(topic, 2, nil)
		cfg := e.config()
		mm := e.start(mmArgs(cfg)...)
		addr := freePort(t)
		v := e.start("verify", "-c", cfg, "--follow", "--interval", "300ms", "--web.listen-address", addr)
		var seq int
		for range 5 {
			produceN(t, e.srcCl, []string{topic}, 2, 200, &seq)
			time.Sleep(200 * time.Millisecond)
		}
		series := func(result string) float64 {
			return scrape(t, addr, `mm2go_verify_records_total{flow="`+e.src+"->"+e.dst+`",result="`+result+`",topic="`+topic+`"}`)
		}
		eventually(t, time.Minute, "every record verified once, round after round", func() bool { return series("matched") == 1000 })
		for _, r := range []string{"missing", "duplicated", "differing", "extra"} {
			require.Zero(t, series(r), r)
		}
		for p := range 2 {
			require.Equal(t, 500.0, scrape(t, addr, `mm2go_verify_source_offset{flow="`+e.src+"->"+e.dst+`",partition="`+strconv.Itoa(p)+`",topic="`+topic+`"}`))
		}
		require.Zero(t, v.stop(t, syscall.SIGTERM, 30*time.Second))
		require.Zero(t, mm.stop(t, syscall.SIGTERM, 30*time.Second))
	})

	t.Run("discrepancies", firstPassOnly(func(t *testing.T) { // a copy made by hand
		e := newEnv(t)
		topic := e.topic("d")
		remote := e.remote(topic)
		e.createTopic(topic, 1, nil)
		createTopicOn(t, e.dstAdm, remote, 1, nil)
		base := time.Now().Add(-time.Hour).UnixMilli()
		record := func(o int) *kgo.Record {
			return &kgo.Record{Key: fmt.Appendf(nil, "k%d", o), Value: fmt.Appendf(nil, "v%d", o), Timestamp: time.UnixMilli(base + int64(o)),
				Headers: []kgo.RecordHeader{{Key: "h", Value: fmt.Appendf(nil, "x%d", o)}}}
		}
		var src, dst []*kgo.Record
		for o := range 50 {
			r := record(o)
			r.Topic = topic
			src = append(src, r)
			c := record(o)
			c.Topic = remote
			switch o {
			case 10: // deleted from the target
				continue
			case 20: // copied twice
				d := record(o)
				d.Topic = remote
				dst = append(dst, d)
			case 30:
				c.Headers[0].Value = []byte("changed")
			case 40:
				c.Value = []byte("changed")
			}
			dst = append(dst, c)
		}
		require.NoError(t, e.srcCl.ProduceSync(e.ctx(), src...).FirstErr())
		require.NoError(t, e.dstCl.ProduceSync(e.ctx(), dst...).FirstErr())
		// The offset map says that source offsets 0-49 were copied to
		// target offsets 0-49 and the flow stands at 50.
		mapTopic := offsetmap.Topic(e.src)
		createTopicOn(t, e.dstAdm, mapTopic, 1, map[string]*string{"cleanup.policy": strPtr("compact")})
		seg, err := offsetmap.SegmentRecord(mapTopic, offsetmap.Segment{Topic: topic, Partition: 0, From: 0, Last: 49, Down: 0})
		require.NoError(t, err)
		pos, err := offsetmap.PositionRecord(mapTopic, offsetmap.Position{Topic: topic, Partition: 0, Next: 50, DownNext: 50}, [16]byte{})
		require.NoError(t, err)
		require.NoError(t, e.dstCl.ProduceSync(e.ctx(), seg, pos).FirstErr())

		code, rep := runVerify(t, e.config())
		require.Equal(t, 1, code)
		require.False(t, rep.OK)
		require.Len(t, rep.Partitions, 1)
		p := rep.Partitions[0]
		require.Equal(t, int64(47), p.Matched, "50 records, one missing, two differing")
		require.Equal(t, verify.Finding{Count: 1, FirstSource: 10, FirstTarget: -1}, p.Missing, "the deleted record")
		require.Equal(t, verify.Finding{Count: 1, FirstSource: 20, FirstTarget: 20}, p.Duplicated, "the second copy of source offset 20, at target offset 20")
		require.Equal(t, verify.Finding{Count: 2, FirstSource: 30, FirstTarget: 30}, p.Differing, "the changed header (source 30 at target 30) and value")
		require.Equal(t, "value, headers", p.DifferingFields)
		require.Zero(t, p.Extra.Count)

		// The text report names each finding's offsets.
		code, out := runCmd(t, "verify", "-c", e.config())
		t.Logf("mm2go verify:\n%s", out)
		require.Equal(t, 1, code, out)
		for _, want := range []string{
			"1 missing on the target, the first at source offset 10",
			"1 copied twice, the first a second copy of source offset 20 at target offset 20",
			"2 copies differ (value, headers), the first of source offset 30 at target offset 30",
			"NOT OK",
		} {
			require.Contains(t, out, want)
		}
	}))

	t.Run("compacted source", func(t *testing.T) {
		e := newEnv(t)
		topic := e.topic("c")
		ms, ratio, del, lag := "200", "0.01", "500", "0"
		e.createTopic(topic, 1, map[string]*string{"cleanup.policy": strPtr("compact"), "segment.ms": &ms,
			"min.cleanable.dirty.ratio": &ratio, "delete.retention.ms": &del, "min.compaction.lag.ms": &lag})
		// The remote topic does not compact: what the source's cleaner
		// removes stays on the target.
		cfg := e.config("config.properties.exclude = cleanup.policy, segment.ms")
		mm := e.start(mmArgs(cfg)...)
		// Every key written twice, all 100 copied before the cleaner
		// removes the first of each: the one segment they are in is not
		// cleaned before the next record rolls it.
		var recs []*kgo.Record
		for i := range 100 {
			recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%50), Value: fmt.Appendf(nil, "v%d", i)})
		}
		require.NoError(t, e.srcCl.ProduceSync(e.ctx(), recs...).FirstErr())
		eventually(t, time.Minute, "100 records copied", func() bool { return records(t, e.dstAdm, e.remote(topic)) >= 100 })
		require.Zero(t, mm.stop(t, syscall.SIGTERM, 30*time.Second))
		// Rolls the segment so that the cleaner can compact the copied one.
		eventually(t, time.Minute, "the source compacted", func() bool {
			require.NoError(t, e.srcCl.ProduceSync(e.ctx(), &kgo.Record{Topic: topic, Key: []byte("roll"), Value: []byte("r")}).FirstErr())
			return compactedAway(t, topic) >= 50
		})
		code, rep := runVerify(t, cfg)
		require.Zero(t, code, "compaction is explained, not loss")
		require.Equal(t, int64(50), rep.Totals.Matched, "the second record of each key")
		require.Equal(t, int64(50), rep.Totals.RemovedFromSource, "the first of each key: removed from the source since the copy")
		require.Zero(t, rep.Totals.Missing.Count+rep.Totals.Extra.Count+rep.Totals.TargetCompacted)
		require.Positive(t, rep.Totals.NotCopied, "the records written after the flow stopped")
	})
}
