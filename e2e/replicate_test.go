package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/policy"
)

// produceN writes n records spread over the topics' partitions: unique
// values, keys (every 13th nil), 0-3 headers (one with a nil value) and
// explicit timestamps in the past, so a copy that lost any of them shows.
// It returns the records per topic and partition in produce order.
func produceN(t *testing.T, cl *kgo.Client, topics []string, partitions int32, n int, seq *int) map[string]map[int32][]rec {
	t.Helper()
	out, err := produce(cl, topics, partitions, n, seq)
	require.NoError(t, err)
	return out
}

// produceEvery writes n records over partitions of topic every interval
// from a goroutine of its own, numbering them from first on; stop ends it
// and returns its first error.
func produceEvery(cl *kgo.Client, topic string, partitions int32, n int, interval time.Duration, first int) (stop func() error) {
	done := make(chan struct{})
	produced := make(chan error, 1)
	go func() {
		seq := first
		for {
			select {
			case <-done:
				produced <- nil
				return
			case <-time.After(interval):
			}
			if _, err := produce(cl, []string{topic}, partitions, n, &seq); err != nil {
				produced <- err
				return
			}
		}
	}()
	return func() error {
		close(done)
		return <-produced
	}
}

// produce is produceN for goroutines other than the test's.
func produce(cl *kgo.Client, topics []string, partitions int32, n int, seq *int) (map[string]map[int32][]rec, error) {
	out := make(map[string]map[int32][]rec)
	base := time.Now().Add(-48 * time.Hour).UnixMilli()
	recs := make([]*kgo.Record, 0, n)
	for range n {
		i := *seq
		*seq++
		topic := topics[i%len(topics)]
		p := int32((i / len(topics)) % int(partitions))
		r := &kgo.Record{
			Topic:     topic,
			Partition: p,
			Value:     []byte(fmt.Sprintf("value-%d-%s", i, strings.Repeat("x", i%200))),
			Timestamp: time.UnixMilli(base + int64(i)),
		}
		if i%13 != 0 {
			r.Key = []byte(fmt.Sprintf("key-%d", i%1000))
		}
		for h := range i % 4 {
			hv := []byte(fmt.Sprintf("h%d-%d", h, i))
			if h == 2 {
				hv = nil
			}
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: fmt.Sprintf("hdr-%d", h), Value: hv})
		}
		recs = append(recs, r)
		if out[topic] == nil {
			out[topic] = make(map[int32][]rec)
		}
		out[topic][p] = append(out[topic][p], recOf(r))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return nil, err
	}
	return out, nil
}

func merge(dst, src map[string]map[int32][]rec) {
	for t, ps := range src {
		if dst[t] == nil {
			dst[t] = make(map[int32][]rec)
		}
		for p, rs := range ps {
			dst[t][p] = append(dst[t][p], rs...)
		}
	}
}

func total(m map[string]map[int32][]rec) int64 {
	var n int64
	for _, ps := range m {
		for _, rs := range ps {
			n += int64(len(rs))
		}
	}
	return n
}

// TestIntegrationReplicate is issue case (a): 3 topics x 6 partitions, 100k
// records with keys, headers and timestamps, half produced before mm2go
// starts and half while it runs. The remote topics must hold exactly the
// same records in the same order per partition, and the progress stored in
// the Connect offsets topic must be MM2's bytes.
func TestIntegrationReplicate(t *testing.T) {
	beside(t)
	e := newEnv(t)
	topics := []string{e.topic("a"), e.topic("b"), e.topic("c")}
	for _, tp := range topics {
		e.createTopic(tp, 6, nil)
	}
	var seq int
	sent := produceN(t, e.srcCl, topics, 6, 50_000, &seq)

	p := e.start("-c", e.config(), "--web.listen-address", "", "--log.progress-interval", "100ms")
	merge(sent, produceN(t, e.srcCl, topics, 6, 50_000, &seq))
	require.EqualValues(t, 100_000, total(sent))

	start := time.Now()
	eventually(t, 2*time.Minute, "100k records on the target", func() bool {
		var n int64
		for _, tp := range topics {
			n += records(t, e.dstAdm, e.remote(tp))
		}
		return n >= 100_000
	})
	t.Logf("100k records replicated %.1fs after the second half was produced", time.Since(start).Seconds())
	// Progress for people: the start says what will be copied, and the
	// backlog's end is reported.
	eventually(t, 30*time.Second, "the progress log", func() bool { return strings.Contains(p.out.String(), "caught up") })
	require.Regexp(t, `flow started.*"topics": 3, "partitions": 18, "backlog_records": [1-9]`, p.out.String())
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")

	for _, tp := range topics {
		got := readAll(t, targetSeeds, e.remote(tp))
		require.Len(t, got, 6, "partitions of %s", e.remote(tp))
		for part, want := range sent[tp] {
			gotRecs := make([]rec, len(got[part]))
			for i, r := range got[part] {
				gotRecs[i] = recOf(r)
			}
			require.Equal(t, want, gotRecs, "records of %s[%d]", e.remote(tp), part)
		}
	}

	// Progress: one record per partition, MM2's key bytes and partitioning,
	// the last copied upstream offset.
	progress := readAll(t, targetSeeds, policy.ConnectOffsetsTopic(e.src))
	last := make(map[string]int64)
	for part, rs := range progress {
		for _, r := range rs {
			co, err := policy.DecodeConnectOffset(r.Key, r.Value)
			require.NoError(t, err)
			require.NotNil(t, co.Source)
			require.Equal(t, "MirrorSourceConnector", co.Connector)
			key := policy.SourceOffsetKey{Cluster: e.src, Topic: co.Source.Topic, Partition: co.Source.Partition}
			require.Equal(t, string(key.Encode()), string(r.Key))
			require.Equal(t, fmt.Sprintf(`["MirrorSourceConnector",{"cluster":"%s","partition":%d,"topic":"%s"}]`, e.src, co.Source.Partition, co.Source.Topic), string(r.Key))
			require.Equal(t, policy.ConnectOffsetPartition(r.Key, 25), part, "partition of %s", r.Key)
			last[fmt.Sprintf("%s-%d", co.Source.Topic, co.Source.Partition)] = co.Offset
		}
	}
	for _, tp := range topics {
		for part, rs := range sent[tp] {
			require.EqualValues(t, len(rs)-1, last[fmt.Sprintf("%s-%d", tp, part)], "stored progress of %s[%d]", tp, part)
		}
	}
}

// TestIntegrationNewTopic is issue case (b): a topic created on the source
// while mm2go runs is replicated within the refresh interval.
func TestIntegrationNewTopic(t *testing.T) {
	e := newEnv(t)
	first := e.topic("first")
	e.createTopic(first, 2, nil)
	var seq int
	produceN(t, e.srcCl, []string{first}, 2, 10, &seq)
	e.start("-c", e.config(), "--web.listen-address", "")
	eventually(t, time.Minute, "first topic replicated", func() bool { return records(t, e.dstAdm, e.remote(first)) == 10 })

	late := e.topic("late")
	created := time.Now()
	e.createTopic(late, 3, nil)
	produceN(t, e.srcCl, []string{late}, 3, 30, &seq)
	eventually(t, 30*time.Second, "late topic replicated", func() bool { return records(t, e.dstAdm, e.remote(late)) == 30 })
	took := time.Since(created)
	t.Logf("topic created while running replicated after %.1fs (refresh.topics.interval.seconds=1)", took.Seconds())
	require.Less(t, took, 5*time.Second, "refresh interval 1s plus the copy")
}

// TestIntegrationKill is issue case (c): mm2go killed with SIGKILL in the
// middle of a stream and restarted misses no record.
func TestIntegrationKill(t *testing.T) {
	beside(t)
	e := newEnv(t)
	topics := []string{e.topic("k1"), e.topic("k2")}
	for _, tp := range topics {
		e.createTopic(tp, 4, nil)
	}
	cfg := e.config()

	// A producer writes 60k records in small steps over several seconds
	// while mm2go runs, so that the kill lands in the middle of the stream.
	sent := make(map[string]map[int32][]rec)
	var mu sync.Mutex
	var seq int
	done := make(chan error, 1)
	go func() {
		for range 60 {
			batch, err := produce(e.srcCl, topics, 4, 1000, &seq)
			if err != nil {
				done <- err
				return
			}
			mu.Lock()
			merge(sent, batch)
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
		done <- nil
	}()

	p := e.start("-c", cfg, "--web.listen-address", "")
	eventually(t, time.Minute, "some records copied", func() bool {
		return records(t, e.dstAdm, e.remote(topics[0]))+records(t, e.dstAdm, e.remote(topics[1])) > 5000
	})
	p.stop(t, syscall.SIGKILL, 10*time.Second)
	var atKill int64
	for _, tp := range topics {
		atKill += records(t, e.dstAdm, e.remote(tp))
	}
	mu.Lock()
	sentAtKill := total(sent)
	mu.Unlock()
	t.Logf("killed with %d records on the target, %d sent so far", atKill, sentAtKill)
	require.Less(t, atKill, int64(60_000), "the kill must interrupt the stream")

	e.start("-c", cfg, "--web.listen-address", "")
	require.NoError(t, <-done)
	mu.Lock()
	want := total(sent)
	mu.Unlock()
	eventually(t, 2*time.Minute, "all records on the target", func() bool {
		var n int64
		for _, tp := range topics {
			n += records(t, e.dstAdm, e.remote(tp))
		}
		return n >= want
	})

	// Every sent record is on the target, in order; a replay after the
	// kill may have written some twice.
	var dups int
	for _, tp := range topics {
		got := readAll(t, targetSeeds, e.remote(tp))
		for part, ws := range sent[tp] {
			seen := make(map[string]int)
			var order []string
			for _, r := range got[part] {
				v := string(r.Value)
				if seen[v] == 0 {
					order = append(order, v)
				}
				seen[v]++
			}
			for _, c := range seen {
				dups += c - 1
			}
			wantOrder := make([]string, len(ws))
			for i, w := range ws {
				wantOrder[i] = string(w.Value)
			}
			require.Equal(t, wantOrder, order, "distinct records of %s[%d] in order", e.remote(tp), part)
		}
	}
	t.Logf("after SIGKILL and restart: %d records sent, 0 missing, %d written twice", want, dups)
}

// TestIntegrationMalformedConfig is issue case (d): a malformed file exits
// with code 2, names the key at fault, and creates nothing on either cluster.
func TestIntegrationMalformedConfig(t *testing.T) {
	e := newEnv(t)
	tp := e.topic("untouched")
	e.createTopic(tp, 1, nil)
	cfg := e.config("replication.factor = two", e.src+"->"+e.dst+".topics.exclude = (?<=x)y")
	p := e.start("-c", cfg, "--web.listen-address", "")
	require.Equal(t, 2, p.wait(t, 30*time.Second))
	out := p.out.String()
	require.Contains(t, out, "replication.factor")
	require.Contains(t, out, "two")
	require.Contains(t, out, "topics.exclude")

	ctx := e.ctx()
	dst, err := e.dstAdm.ListTopics(ctx)
	require.NoError(t, err)
	for name := range dst {
		require.NotContains(t, name, e.id, "topic %s created on the target", name)
	}
	src, err := e.srcAdm.ListTopics(ctx)
	require.NoError(t, err)
	for name := range src {
		if name != tp {
			require.NotContains(t, name, e.id, "topic %s created on the source", name)
		}
	}
}

// freePort returns a loopback address nobody listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// scrape returns the value of a metric series (name with labels, as printed
// in the exposition format), or -1 if absent.
func scrape(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return -1
}

// TestIntegrationReload: SIGHUP re-reads the file; a widened topic filter
// starts copying the new topic, and a broken file is refused while the
// running configuration goes on.
func TestIntegrationReload(t *testing.T) {
	beside(t)
	e := newEnv(t)
	a, b := e.topic("a"), e.topic("b")
	e.createTopic(a, 1, nil)
	e.createTopic(b, 1, nil)
	var seq int
	produceN(t, e.srcCl, []string{a, b}, 1, 20, &seq)
	cfg := e.config(e.src + "->" + e.dst + ".topics.exclude = " + b)
	addr := freePort(t)
	p := e.start("-c", cfg, "--web.listen-address", addr)
	eventually(t, time.Minute, "topic a copied", func() bool { return records(t, e.dstAdm, e.remote(a)) == 10 })
	require.Zero(t, records(t, e.dstAdm, e.remote(b)))
	require.Equal(t, "ok\n", httpGet(t, "http://"+addr+"/healthz"))
	eventually(t, 30*time.Second, "ready", func() bool { return getBody("http://"+addr+"/readyz") == "ready\n" })

	// Widen the filter and reload.
	require.NoError(t, os.WriteFile(cfg, []byte(strings.Replace(mustRead(t, cfg), e.src+"->"+e.dst+".topics.exclude = "+b, "", 1)), 0o600))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	eventually(t, time.Minute, "topic b copied after the reload", func() bool { return records(t, e.dstAdm, e.remote(b)) == 10 })
	require.InDelta(t, 1, scrape(t, addr, "mm2go_config_last_reload_successful"), 0)

	// A broken file: refused, still copying.
	require.NoError(t, os.WriteFile(cfg, []byte(mustRead(t, cfg)+"replication.factor = two\n"), 0o600))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	eventually(t, 30*time.Second, "the reload refused", func() bool { return scrape(t, addr, "mm2go_config_last_reload_successful") == 0 })
	produceN(t, e.srcCl, []string{a}, 1, 5, &seq)
	eventually(t, time.Minute, "copying goes on", func() bool { return records(t, e.dstAdm, e.remote(a)) == 15 })
	require.Contains(t, p.out.String(), "replication.factor")
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second))
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// getBody returns the body of any answer, or the error text.
func getBody(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
