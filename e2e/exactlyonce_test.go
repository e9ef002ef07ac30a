package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/ktest"
)

// TestIntegrationExactlyOnce copies 3 topics of 6 partitions, written
// steadily by an idempotent producer, and a topic written by a
// transactional producer that aborts every third transaction, from the
// one-node source to the three-node target with
// <target>.exactly.once.source.support = enabled, while mm2go is SIGKILLed
// 20 times at random moments and one target broker is killed and, later,
// restarted. A read_committed consumer of the target then sees every source
// record exactly once and in order per partition, and of the transactional
// topic only the committed records; mm2go verify finds every copy where the
// offset map says.
//
// It runs in parallel with the other parallel tests (after the serial
// ones); those that use the three-node target whose broker it kills wait
// for it (target3Up).
func TestIntegrationExactlyOnce(t *testing.T) {
	firstPassOnly(func(t *testing.T) {
		t.Parallel()
		testExactlyOnce(t, false)
	})(t)
}

// TestIntegrationExactlyOnceMM2 runs the same scenario with Apache MM2's
// exactly-once mode (KIP-618) as the replicator, SIGKILLed as often. Each
// of MM2's starts takes seconds, so the test takes minutes: it runs only
// with MM2GO_TEST_MM2_EOS=1, not in the test command.
func TestIntegrationExactlyOnceMM2(t *testing.T) {
	if os.Getenv("MM2GO_TEST_MM2_EOS") != "1" {
		t.Skip("minutes long; MM2GO_TEST_MM2_EOS=1 runs it")
	}
	testExactlyOnce(t, true)
}

func testExactlyOnce(t *testing.T, mm2 bool) {
	need3(t)
	target3Up.Lock()
	t.Cleanup(target3Up.Unlock)
	e := newEnv(t)
	const partitions, kills = 6, 20
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	topics := []string{e.topic("a"), e.topic("b"), e.topic("c")}
	txnTopic := e.topic("txn")
	createTopics(ctx, t, e.srcAdm, partitions, append(slices.Clone(topics), txnTopic))

	addr := freePort(t)
	lines := []string{
		"clusters = " + e.src + ", " + e.dst,
		e.src + ".bootstrap.servers = " + strings.Join(sourceSeeds, ","),
		e.dst + ".bootstrap.servers = " + strings.Join(target3Seeds, ","),
		e.dst + ".exactly.once.source.support = enabled",
		e.src + "->" + e.dst + ".enabled = true",
		e.src + "->" + e.dst + ".topics = t" + e.id + "-.*",
		e.dst + "->" + e.src + ".enabled = false",
		"offset-syncs.topic.replication.factor = 1",
		"refresh.topics.interval.seconds = 1",
		"heartbeats.replication.enabled = false",
		"emit.heartbeats.enabled = false",
	}
	if mm2 {
		lines = append(lines, e.mm2Only()...)
		lines = append(lines,
			// MM2's connector supports exactly-once only when its source
			// consumer reads committed records (mm2go's default).
			e.src+".consumer.isolation.level = read_committed",
			"dedicated.mode.enable.internal.rest = false",
			e.dst+".offset.flush.interval.ms = 1000",
		)
	}
	cfg := filepath.Join(e.dir, "mm2.properties")
	require.NoError(t, os.WriteFile(cfg, []byte(strings.Join(lines, "\n")+"\n"), 0o600))

	// The idempotent producer: the values of a partition count 0, 1, 2...
	var (
		mu      sync.Mutex
		sent    = map[string]map[int32]int{}
		prodErr error
	)
	stopPlain := make(chan struct{})
	plainDone := make(chan struct{})
	go func() {
		defer close(plainDone)
		next := map[string]map[int32]int{}
		for _, tp := range topics {
			next[tp], sent[tp] = map[int32]int{}, map[int32]int{}
		}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopPlain:
				if err := e.srcCl.Flush(ctx); err != nil {
					mu.Lock()
					prodErr = err
					mu.Unlock()
				}
				return
			case <-tick.C:
			}
			for _, tp := range topics {
				p := int32(i % partitions)
				v := next[tp][p]
				next[tp][p]++
				e.srcCl.Produce(ctx, &kgo.Record{Topic: tp, Partition: p, Value: []byte(strconv.Itoa(v))}, func(r *kgo.Record, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						prodErr = err
						return
					}
					sent[r.Topic][r.Partition]++
				})
			}
		}
	}()

	// The transactional producer: a transaction of one record per
	// partition every 50 ms; every third is aborted.
	txnCl, err := kgo.NewClient(kgo.SeedBrokers(sourceSeeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID("eos-source-"+e.id))
	require.NoError(t, err)
	defer txnCl.Close()
	committed := map[int32][]string{}
	var txnErr error
	stopTxn := make(chan struct{})
	txnDone := make(chan struct{})
	go func() {
		defer close(txnDone)
		for n := 0; ; n++ {
			select {
			case <-stopTxn:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if txnErr = txnCl.BeginTransaction(); txnErr != nil {
				return
			}
			var recs []*kgo.Record
			for p := range int32(partitions) {
				recs = append(recs, &kgo.Record{Topic: txnTopic, Partition: p, Value: fmt.Appendf(nil, "%d", n)})
			}
			if txnErr = txnCl.ProduceSync(ctx, recs...).FirstErr(); txnErr != nil {
				return
			}
			commit := n%3 != 0
			if txnErr = txnCl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); txnErr != nil {
				return
			}
			if commit {
				for p := range int32(partitions) {
					committed[p] = append(committed[p], strconv.Itoa(n))
				}
			}
		}
	}()

	target3 := &testCluster{t: t, script: filepath.Join(testbedDir(), "kafka-cluster.sh"), name: "secondary3"}
	// start runs the replicator and returns what SIGKILLs it.
	start := func() (kill func()) {
		mm := e.start("-c", cfg)
		return func() {
			require.NoError(t, mm.cmd.Process.Kill())
			<-mm.done
		}
	}
	if mm2 {
		in := newInterop(t)
		start = func() (kill func()) {
			in.startMM2(t, "eos"+e.id, cfg)
			return func() {
				out, err := in.script(time.Minute, "mm2.sh", "kill", "eos"+e.id)
				require.NoError(t, err, "mm2.sh kill:\n%s", out)
			}
		}
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var lived []time.Duration
	for i := range kills {
		kill := start()
		life := 300*time.Millisecond + time.Duration(rng.Int64N(int64(2700*time.Millisecond)))
		if mm2 {
			// MM2's tasks start seconds after its herders do.
			life += 5 * time.Second
		}
		lived = append(lived, life)
		time.Sleep(life)
		kill()
		switch i {
		case 6:
			target3.run("kill", "2")
			t.Logf("target broker 2 killed after the %dth SIGKILL", i+1)
		case 12:
			target3.run("restart-node", "2")
			t.Logf("target broker 2 restarted after the %dth SIGKILL", i+1)
		}
	}
	t.Logf("the replicator ran %v between its %d SIGKILLs", lived, kills)

	// stopProducers stops both producers once the last replicator run
	// copied two more seconds of traffic.
	stopProducers := func() {
		time.Sleep(2 * time.Second)
		close(stopPlain)
		close(stopTxn)
		<-plainDone
		<-txnDone
		require.NoError(t, prodErr)
		require.NoError(t, txnErr)
	}
	if mm2 {
		kill := start()
		stopProducers()
		dstAdm := admin3(t, target3Seeds)
		eventually(t, 5*time.Minute, "every source record copied by MM2", func() bool {
			for _, tp := range append(slices.Clone(topics), txnTopic) {
				src, err := ktest.RecordsPer(ctx, e.srcAdm, tp)
				if err != nil {
					return false
				}
				dst, err := ktest.RecordsPer(ctx, dstAdm, e.remote(tp))
				if err != nil {
					return false
				}
				for p, n := range src {
					if dst[p] < n {
						return false
					}
				}
			}
			return true
		})
		kill()
		checkExactlyOnce(t, e, partitions, topics, sent, txnTopic, committed)
		return
	}
	mm := e.start("-c", cfg, "--web.listen-address", addr)
	stopProducers()
	flow := e.src + "->" + e.dst
	eventually(t, 2*time.Minute, "every source record copied", func() bool {
		for _, tp := range append(slices.Clone(topics), txnTopic) {
			if scrape(t, addr, `mm2go_replicator_lag_records{flow="`+flow+`",task="0",topic="`+tp+`"}`) != 0 {
				return false
			}
		}
		return true
	})
	require.Positive(t, scrape(t, addr, `mm2go_replicator_transactions_total{flow="`+flow+`",result="committed"}`))
	require.Zero(t, mm.stop(t, syscall.SIGTERM, 30*time.Second))
	checkExactlyOnce(t, e, partitions, topics, sent, txnTopic, committed)
	// The offset map, which failover translates with, against the target:
	// every source record once, where the map says.
	if code, rep := runVerify(t, cfg); code != 0 {
		for _, p := range rep.Partitions {
			if !p.OK() {
				t.Errorf("mm2go verify: %s[%d]: %+v", p.Topic, p.Partition, p)
			}
		}
		t.Fatalf("mm2go verify exited %d", code)
	}
}

// checkExactlyOnce checks that a read_committed consumer of the target
// sees every record sent to topics once, in order per partition (the
// values of a partition count 0, 1, 2...), and of txnTopic the committed
// records only.
func checkExactlyOnce(t *testing.T, e *env, partitions int32, topics []string, sent map[string]map[int32]int, txnTopic string, committed map[int32][]string) {
	t.Helper()
	for _, tp := range topics {
		got := readAll(t, target3Seeds, e.remote(tp))
		for p := range partitions {
			want := make([]string, sent[tp][p])
			for i := range want {
				want[i] = strconv.Itoa(i)
			}
			require.Equal(t, want, values(got[p]), "%s[%d] on the target, read_committed", e.remote(tp), p)
		}
	}
	got := readAll(t, target3Seeds, e.remote(txnTopic))
	for p := range partitions {
		// values is never nil; a partition no committed transaction wrote
		// to has no entry in committed.
		require.Equal(t, append([]string{}, committed[p]...), values(got[p]), "%s[%d] on the target, read_committed: the committed records only", e.remote(txnTopic), p)
	}
	t.Logf("%d records of each of %d partitions and %d committed of %s per partition, each once",
		sent[topics[0]][0], int(partitions)*len(topics), len(committed[0]), txnTopic)
}

// values are the values of recs as strings.
func values(recs []*kgo.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}
