package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/ktest"
	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

// variant is one case of the seed scenario (issue 3 item 6).
type variant struct {
	identity bool               // IdentityReplicationPolicy: same topic name on both clusters
	configs  map[string]*string // of the source topic
	w        workload
	txn      bool // transactional producers (on both clusters)
	restart  bool // SIGKILL and restart mm2go between the last commit on the source and the switch
	// takeover splits the flow into three tasks and runs two more mm2go
	// processes (other instance ids) before the switch, one task each; the
	// one running task 0 is SIGKILLed between the last commit on the source
	// and the switch, and another takes its task over.
	takeover bool
	backlog  int  // the group leaves the source this many records behind
	compact  bool // wait for the source's cleaner before mm2go starts
	// pause stops the producer at the switch and starts it on the target
	// only once `failover check` passed (the identity policy's runbook).
	pause bool
	// overlap: producers were switched before replication finished, so
	// `failover check` can never pass (foreign_records); the consumer
	// switches once mm2go committed the offsets that lose nothing.
	overlap bool
}

// failover is one run of the seed scenario: a producer writing to
// "messages" and a consumer group with manual commits, both switched from
// the source cluster to the target (and, for failback, back).
type failover struct {
	t      *testing.T
	e      *env
	v      variant
	group  string
	topic  string // "messages": on the source, and the local topic on the target
	remote string // the source topic's name on the target
	cfg    string // the forward flow's file
	mm     *proc  // the forward flow's mm2go
	prod   *producer
	ty     *tally
	cons   *consumer
	src    dest // "messages" on the source
	dst    dest // "messages" on the target

	// The consumer's cluster and topics now.
	consAlias  string
	consAdm    *kadm.Client
	consTopics []string

	cfgs            map[[2]string]string // config file per flow (source, target)
	startEnds       map[partKey]int64    // source ends when mm2go started
	compactedBefore int64                // records the cleaner removed before mm2go started
}

func mmArgs(cfg string) []string { return []string{"-c", cfg, "--web.listen-address", ""} }

func newFailover(t *testing.T, v variant) *failover {
	t.Helper()
	e := newEnv(t)
	f := &failover{t: t, e: e, v: v, group: "g" + e.id, topic: e.topic("messages"), ty: newTally()}
	f.remote = e.remote(f.topic)
	var extra []string
	if v.identity {
		f.remote = f.topic
		extra = append(extra, "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy")
	}
	if v.takeover {
		extra = append(extra, "tasks.max = 3")
	}
	e.createTopic(f.topic, 6, v.configs)
	f.cfg = flowConfig(e, "forward.properties", e.src, e.dst, extra...)
	f.cfgs = map[[2]string]string{{e.src, e.dst}: f.cfg}
	var srcTxn, dstTxn string
	if v.txn {
		srcTxn, dstTxn = "tx-src-"+e.id, "tx-dst-"+e.id
	}
	f.src = dest{alias: e.src, cl: newProducerClient(t, sourceSeeds, srcTxn), topic: f.topic, parts: 6, txn: v.txn}
	f.dst = dest{alias: e.dst, cl: newProducerClient(t, targetSeeds, dstTxn), topic: f.topic, parts: 6, txn: v.txn}
	f.prod = newProducer(t, v.w)
	return f
}

// run is phase 1: the producer and the consumer group on the source, mm2go
// copying to the target, until the consumer has read a few thousand
// records.
func (f *failover) run() {
	t, e := f.t, f.e
	f.prod.start(f.src)
	if f.v.compact {
		// Compaction must have removed records before mm2go reads the
		// topic: it then copies a log with gaps.
		eventually(t, 60*time.Second, "the source's cleaner compacted "+f.topic, func() bool {
			require.NoError(t, f.prod.failure())
			f.compactedBefore = compactedAway(t, f.topic)
			return f.compactedBefore > 0
		})
	}
	f.startEnds = endsOf(t, e.srcAdm, e.src, f.topic)
	args := mmArgs(f.cfg)
	if f.v.takeover {
		args = append(args, "--instance-id", e.id+"-a")
	}
	f.mm = e.start(args...)
	f.consume(sourceSeeds, e.src, e.srcAdm, kgo.NewOffset().AtStart(), f.topic)
	eventually(t, 60*time.Second, "consumer and mm2go under way", func() bool {
		require.NoError(t, f.prod.failure())
		require.NoError(t, f.cons.failure())
		return f.ty.delivered(e.src) >= 2000 && records(t, e.dstAdm, f.remote) > 0
	})
	// mm2go watches the group while it consumes, as in the runbook, where
	// mm2go runs before the switch: its checkpoints of the group are there.
	// (A group mm2go never saw consume gets its offsets on the target only
	// once a consumer of it starts there; see knock.)
	eventually(t, 60*time.Second, "mm2go's checkpoints of "+f.group, func() bool {
		require.NoError(t, f.cons.failure())
		return len(lastCheckpoints(t, e, f.group, f.remote)) > 0
	})
}

// lastCheckpoints returns the last checkpoint of group per partition of the
// remote topic, read from the target's checkpoints topic.
func lastCheckpoints(t *testing.T, e *env, group, remote string) map[int32]policy.Checkpoint {
	t.Helper()
	cpTopic := policy.New(policy.KindDefault, ".", true, e.src).CheckpointsTopic(e.src)
	last := make(map[int32]policy.Checkpoint)
	for _, rs := range readAll(t, targetSeeds, cpTopic) {
		for _, r := range rs {
			if cp, err := policy.DecodeCheckpoint(r.Key, r.Value); err == nil && cp.Group == group && cp.Topic == remote {
				last[cp.Partition] = cp
			}
		}
	}
	return last
}

func (f *failover) consume(seeds []string, alias string, adm *kadm.Client, reset kgo.Offset, topics ...string) {
	f.cons = startConsumer(f.t, seeds, alias, f.group, reset, f.ty, topics...)
	f.consAlias, f.consAdm, f.consTopics = alias, adm, topics
}

// failover switches the producer to the target, lets the consumer finish
// what was sent to the source (unless it already left with a backlog),
// waits for `mm2go failover check` and starts the consumer on the target
// with the same group and auto.offset.reset=none.
func (f *failover) failover() {
	f.switchProducer()
	f.switchConsumer()
}

// switchProducer is the first half of failover: the producer writes to the
// target from now on (or, with variant.pause, to nowhere until the
// consumer's switch).
func (f *failover) switchProducer() {
	t, e := f.t, f.e
	if !f.v.identity {
		// The local topic exists before the producer is switched, so the
		// group-offset sync initializes the group's offsets on it.
		createTopicOn(t, e.dstAdm, f.topic, 6, nil)
	}
	if f.v.pause {
		f.prod.pause()
		return
	}
	f.prod.switchTo(f.dst)
}

// switchConsumer is the second half of failover.
func (f *failover) switchConsumer() {
	t, e := f.t, f.e
	// takeover: three instances, one task each; the one running task 0
	// (which runs the checkpoints and the group-offset sync) is killed.
	var instances map[string]*proc
	if f.v.takeover {
		instances = map[string]*proc{e.id + "-a": f.mm}
		for _, id := range []string{"b", "c"} {
			instances[e.id+"-"+id] = e.start(append(mmArgs(f.cfg), "--instance-id", e.id+"-"+id)...)
		}
		eventually(t, 60*time.Second, "the flow's three tasks on three instances", func() bool {
			o := taskOwners(t, e.dstAdm, e.src, 3)
			return o != nil && len(slices.Compact(slices.Sorted(maps.Values(o)))) == 3
		})
	}
	if f.v.backlog == 0 {
		f.cons.drain(f.prod.endsOf(e.src, f.topic), 60*time.Second)
	}
	f.cons.stop()
	committed := groupOffsets(t, e.srcAdm, e.src, f.group)
	t.Logf("consumer left the source at %v after %d deliveries", committed, f.ty.delivered(e.src))
	if f.v.restart {
		f.mm.stop(t, syscall.SIGKILL, 10*time.Second)
		f.mm = e.start(mmArgs(f.cfg)...)
		t.Logf("mm2go killed with SIGKILL and started again")
	}
	if f.v.takeover {
		o := taskOwners(t, e.dstAdm, e.src, 3)
		require.NotNil(t, o, "every task running at the switch")
		victim := o[0]
		instances[victim].stop(t, syscall.SIGKILL, 10*time.Second)
		t.Logf("%s, running task 0 of %v, killed with SIGKILL", victim, o)
		defer func() {
			// The group notices the SIGKILL when the victim's session
			// times out (10 s), which the failover may beat.
			var o map[int32]string
			eventually(t, time.Minute, "another instance running task 0", func() bool {
				o = taskOwners(t, e.dstAdm, e.src, 3)
				return o != nil && o[0] != victim
			})
			t.Logf("tasks after the takeover: %v", o)
		}()
	}
	if f.v.overlap {
		out := waitFailoverRefused(t, f.cfg, e.src+"->"+e.dst, f.group, "foreign_records", 90*time.Second)
		t.Logf("failover check %s->%s refuses, as it must:\n%s", e.src, e.dst, out)
		// The operator goes ahead anyway: wait for the sync to commit the
		// offsets that lose nothing.
		parts := endsOf(t, e.dstAdm, e.dst, f.topic)
		eventually(t, 60*time.Second, "group offsets committed on the target", func() bool {
			return len(groupOffsets(t, e.dstAdm, e.dst, f.group)) >= len(parts)
		})
	} else {
		took := waitFailoverCheck(t, f.cfg, e.src+"->"+e.dst, f.group, 90*time.Second)
		t.Logf("failover check %s->%s passed after %.1fs", e.src, e.dst, took.Seconds())
	}
	if f.v.pause {
		f.prod.switchTo(f.dst)
	}
	topics := []string{f.remote, f.topic}
	if f.v.identity {
		topics = topics[:1]
	} else {
		// failover check looks at the replicated topics only: the local
		// topic, created before the switch, is initialized at the sync's
		// next look at the group (sync.group.offsets.interval.seconds).
		eventually(t, 30*time.Second, "the group's offsets on the local topic "+f.topic, func() bool {
			have := groupOffsets(t, e.dstAdm, e.dst, f.group)
			for k := range endsOf(t, e.dstAdm, e.dst, f.topic) {
				if _, ok := have[k]; !ok {
					return false
				}
			}
			return true
		})
	}
	translated := requireCommitted(t, e.dstAdm, e.dst, f.group, topics...)
	t.Logf("group offsets on the target: %v", translated)
	f.ty.startAt(translated)
	f.consume(targetSeeds, e.dst, e.dstAdm, kgo.NoResetOffset(), topics...)
	f.waitFresh(e.dst)
}

// waitFresh waits until the consumer on alias has received records the
// producer sent there after it was switched.
func (f *failover) waitFresh(alias string) {
	base, baseD := f.prod.count(alias), f.ty.delivered(alias)
	eventually(f.t, 60*time.Second, "consumer on "+alias+" reading new records", func() bool {
		require.NoError(f.t, f.prod.failure())
		require.NoError(f.t, f.cons.failure())
		return f.prod.count(alias) >= base+500 && f.ty.delivered(alias) >= baseD+500
	})
}

// consumerEnds are the offsets the consumer must reach on its topics: the
// high watermarks, except where a transactional producer wrote (the last
// committed record there is followed by a marker).
func (f *failover) consumerEnds() map[partKey]int64 {
	ends := dataEnds(f.t, f.consAdm, endsOf(f.t, f.consAdm, f.consAlias, f.consTopics...))
	if f.v.txn {
		for k, v := range f.prod.endsOf(f.consAlias, f.topic) {
			ends[k] = v
		}
	}
	return ends
}

// failback is issue 3 item 7: the forward flow stops, the reverse flow
// starts, the producer goes back to the source, the consumer finishes on the
// target and, once `mm2go failover check` of the reverse flow passes, goes
// back to the source reading "messages" and "<dst>.messages".
func (f *failover) failback() {
	t, e := f.t, f.e
	require.Equal(t, 0, f.mm.stop(t, syscall.SIGTERM, 30*time.Second), "forward mm2go exits cleanly")
	rcfg := flowConfig(e, "reverse.properties", e.dst, e.src)
	f.cfgs[[2]string{e.dst, e.src}] = rcfg
	e.start(mmArgs(rcfg)...)
	f.prod.switchTo(f.src)
	f.cons.drain(f.consumerEnds(), 60*time.Second)
	f.cons.stop()
	t.Logf("consumer left the target at %v", groupOffsets(t, e.dstAdm, e.dst, f.group))
	took := waitFailoverCheck(t, rcfg, e.dst+"->"+e.src, f.group, 90*time.Second)
	t.Logf("failover check %s->%s passed after %.1fs", e.dst, e.src, took.Seconds())
	back := e.dst + "." + f.topic
	translated := requireCommitted(t, e.srcAdm, e.src, f.group, f.topic, back)
	t.Logf("group offsets on the source: %v", translated)
	f.ty.startAt(translated)
	f.consume(sourceSeeds, e.src, e.srcAdm, kgo.NoResetOffset(), f.topic, back)
	f.waitFresh(e.src)
}

// finish stops the producer, lets the consumer read to the end and returns
// the outcome over the whole run; expected are the ids that must have been
// received (nil: every id sent).
func (f *failover) finish(expected map[int]bool) outcome {
	t := f.t
	f.prod.stop()
	require.NoError(t, f.prod.failure())
	f.cons.drain(f.consumerEnds(), 90*time.Second)
	f.cons.stop()
	if expected == nil {
		expected = make(map[int]bool)
		f.prod.mu.Lock()
		for id := range f.prod.sent {
			expected[id] = true
		}
		f.prod.mu.Unlock()
	}
	f.prod.mu.Lock()
	defer f.prod.mu.Unlock()
	return compareIDs(f.prod.sent, expected, f.ty)
}

// check logs the counts and asserts nothing missing, nothing twice, nothing
// that was not sent.
func (f *failover) check(o outcome, more string) {
	t := f.t
	f.prod.mu.Lock()
	aborted, tombs := len(f.prod.aborted), f.prod.tombstones
	f.prod.mu.Unlock()
	t.Logf("sent %d (%d expected), received %d (%d deliveries), missing %d, duplicates %d, never sent %d; aborted %d, tombstones %d%s",
		o.sent, o.expected, o.received, o.deliveries, o.missing, o.duplicates, o.unexpected, aborted, tombs, more)
	for _, l := range o.report {
		t.Log(l)
	}
	if o.missing+o.duplicates+o.unexpected > 0 {
		logOffsetMap(t, f.e.src, f.topic)
		for _, flow := range [][2]string{{f.e.src, f.e.dst}, {f.e.dst, f.e.src}} {
			if _, ok := f.cfgs[flow]; ok {
				_, out := runCmd(t, "offsets", "translate", "-c", f.cfgs[flow], "--flow", flow[0]+"->"+flow[1], "--group", f.group)
				t.Logf("mm2go offsets translate %s->%s now:\n%s", flow[0], flow[1], out)
			}
		}
	}
	require.Zero(t, o.missing, "records missing")
	require.Zero(t, o.duplicates, "records received twice")
	require.Zero(t, o.unexpected, "records received that were never sent as committed records")
}

// TestIntegrationFailoverTakeover is case (a) with three instances and the
// flow split into three tasks (tasks.max = 3), one per instance: the
// process running task 0 (the checkpoints and the group-offset sync) is
// killed right after the consumer group's final commit on the source,
// usually before it synced the group; another process takes its task over
// after the group's session timeout and the group fails over with nothing
// missing and nothing twice. (A standby that
// never saw the group consume learns from the checkpoints that it did; the
// checkpoint package's unit tests show that path alone.)
func TestIntegrationFailoverTakeover(t *testing.T) {
	beside(t)
	f := newFailover(t, variant{takeover: true})
	f.run()
	f.failover()
	f.check(f.finish(nil), "")
}

// TestIntegrationFailoverDefault is case (a): the default policy; on the
// target the consumer reads "<src>.messages" and the local "messages".
// It also checks the checkpoints and offset syncs the run left behind.
func TestIntegrationFailoverDefault(t *testing.T) {
	beside(t)
	f := newFailover(t, variant{})
	f.run()
	f.failover()
	f.check(f.finish(nil), "")
	checkCheckpoints(t, f.e, f.group, f.topic, 6)
	checkOffsetSyncs(t, f.e, sourceSeeds, policy.New(policy.KindDefault, ".", true, f.e.src).OffsetSyncsTopic(f.e.dst), f.topic)
}

// TestIntegrationFailoverIdentity is case (b): IdentityReplicationPolicy,
// the same topic name on both clusters. The producer stops writing to the
// source at the switch and starts writing to "messages" on the target once
// `failover check` passed, that is once replication has copied everything:
// see TestIntegrationFailoverIdentityInterleaved for why.
func TestIntegrationFailoverIdentity(t *testing.T) {
	beside(t)
	f := newFailover(t, variant{identity: true, pause: true})
	f.run()
	f.failover()
	f.check(f.finish(nil), "")
}

// TestIntegrationFailoverIdentityInterleaved is case (b) as the seed
// scenario orders it: the producer writes to "messages" on the target
// while replication still copies the source's tail into the same topic.
// To make that happen every time, mm2go is stopped (SIGTERM) while the
// producer still writes to the source and started again after the producer
// wrote to the target, so copies of source records land after the
// producer's records in every partition.
//
// No committed offset can then give both nothing missing and nothing
// twice: the group has read the copied tail on the source but none of the
// producer's records that precede it on the target. The least a correct
// translation must give is nothing missing (nothing is ever skipped),
// with duplicates only of the copies that follow the first foreign record.
func TestIntegrationFailoverIdentityInterleaved(t *testing.T) {
	beside(t)
	f := newFailover(t, variant{identity: true, overlap: true})
	e := f.e
	f.run()
	require.Equal(t, 0, f.mm.stop(t, syscall.SIGTERM, 30*time.Second), "mm2go exits cleanly")
	base := f.prod.count(e.src)
	eventually(t, 30*time.Second, "a source tail mm2go has not copied", func() bool { return f.prod.count(e.src) >= base+300 })
	f.switchProducer()
	eventually(t, 30*time.Second, "records written to the target", func() bool { return f.prod.count(e.dst) >= 300 })
	f.mm = e.start(mmArgs(f.cfg)...)
	f.switchConsumer()
	o := f.finish(nil)

	// Where the copies of the tail landed: after the producer's first
	// record in the same partition.
	f.prod.mu.Lock()
	sentTo := make(map[int]string, len(f.prod.sent))
	for id, a := range f.prod.sent {
		sentTo[id] = a.alias
	}
	f.prod.mu.Unlock()
	var interleaved int
	var where []string
	for p, rs := range readAll(t, targetSeeds, f.topic) {
		first := int64(-1)
		var n int
		for _, r := range rs {
			id, _ := idOf(r.Value)
			switch {
			case sentTo[id] == e.dst && first < 0:
				first = r.Offset
			case sentTo[id] == e.src && first >= 0:
				n++
			}
		}
		interleaved += n
		where = append(where, fmt.Sprintf("[%d] %d copies after the first producer record at %d", p, n, first))
	}
	sort.Strings(where)
	t.Logf("target topic %s: %s", f.topic, strings.Join(where, "; "))
	require.Positive(t, interleaved, "the scenario must interleave copies and the producer's records")
	if o.duplicates <= interleaved {
		// Duplicates of the interleaved copies are the price of losing
		// nothing; check the rest as in every case.
		t.Logf("%d duplicates accepted: at most the %d interleaved copies", o.duplicates, interleaved)
		o.duplicates = 0
	}
	f.check(o, fmt.Sprintf("; %d copies interleaved after the producer's first records on the target", interleaved))
}

// TestIntegrationFailoverCompacted is case (c): a compacted source topic
// with tombstones, compacted before and while mm2go copies it. Missing are
// the ids still in the source log at the end (or sent to the target) that
// the consumer never received.
func TestIntegrationFailoverCompacted(t *testing.T) {
	beside(t)
	ms, ratio, del, lag := "200", "0.01", "500", "0"
	f := newFailover(t, variant{
		configs: map[string]*string{"cleanup.policy": strPtr("compact"), "segment.ms": &ms,
			"min.cleanable.dirty.ratio": &ratio, "delete.retention.ms": &del, "min.compaction.lag.ms": &lag},
		w:       workload{keys: 300, tombEvery: 7},
		compact: true,
	})
	f.run()
	f.failover()
	// What the source log holds at the end, after compaction.
	f.prod.stop()
	log := readAll(t, sourceSeeds, f.topic)
	expected := make(map[int]bool)
	inLog := make(map[partKey]map[int64]bool)
	var present int
	for _, rs := range log {
		for _, r := range rs {
			k := partKey{f.e.src, r.Topic, r.Partition}
			if inLog[k] == nil {
				inLog[k] = make(map[int64]bool)
			}
			inLog[k][r.Offset] = true
			present++
			if id, ok := idOf(r.Value); ok {
				expected[id] = true
			}
		}
	}
	f.prod.mu.Lock()
	var toTarget int
	for id, a := range f.prod.sent {
		if a.alias == f.e.dst {
			expected[id] = true
			toTarget++
		}
	}
	ends := make(map[partKey]int64)
	for k, v := range f.prod.ends {
		if k.alias == f.e.src {
			ends[k] = v
		}
	}
	f.prod.mu.Unlock()
	// Records the cleaner removed after mm2go started.
	var during, span int64
	for k, end := range ends {
		for o := f.startEnds[k]; o < end; o++ {
			span++
			if !inLog[k][o] {
				during++
			}
		}
	}
	require.Positive(t, f.compactedBefore, "compaction before mm2go started")
	require.Positive(t, during, "compaction while mm2go ran")
	f.check(f.finish(expected), fmt.Sprintf("; source log: %d records left, %d compacted away before mm2go started, %d of %d after; %d sent to the target",
		present, f.compactedBefore, during, span, toTarget))
}

// TestIntegrationFailoverTransactions is case (d): transactional producers
// abort every fourth transaction; consumers read committed. Sent are the
// committed records only; none of the aborted ones may be received.
func TestIntegrationFailoverTransactions(t *testing.T) {
	beside(t)
	f := newFailover(t, variant{txn: true, w: workload{batch: 30, every: 20 * time.Millisecond, abortEvery: 4}})
	f.run()
	f.failover()
	o := f.finish(nil)
	f.prod.mu.Lock()
	f.ty.mu.Lock()
	var abortedGot []string
	for id, a := range f.prod.aborted {
		if ds := f.ty.got[id]; len(ds) > 0 {
			abortedGot = append(abortedGot, fmt.Sprintf("id-%d aborted at %s received at %v", id, a, ds))
		}
	}
	txns := f.prod.txns
	f.ty.mu.Unlock()
	f.prod.mu.Unlock()
	f.check(o, fmt.Sprintf("; %d transactions, %d aborted records received", txns, len(abortedGot)))
	require.Empty(t, abortedGot, "aborted records received")
}

// TestIntegrationFailoverRestart is case (e): mm2go is killed with SIGKILL
// and started again after the consumer's last commit on the source and
// before the consumer is switched.
func TestIntegrationFailoverRestart(t *testing.T) {
	beside(t)
	f := newFailover(t, variant{restart: true})
	f.run()
	f.failover()
	f.check(f.finish(nil), "")
}

// TestIntegrationFailoverBacklog is case (f): the group leaves the source
// 100k records behind and reads them on the target.
func TestIntegrationFailoverBacklog(t *testing.T) {
	beside(t)
	const backlog = 100_000
	f := newFailover(t, variant{backlog: backlog})
	f.run()
	f.cons.stop()
	f.prod.bulk(f.src, backlog)
	var lag int64
	committed := groupOffsets(t, f.e.srcAdm, f.e.src, f.group)
	for k, end := range endsOf(t, f.e.srcAdm, f.e.src, f.topic) {
		lag += end - committed[k]
	}
	require.GreaterOrEqual(t, lag, int64(backlog))
	t.Logf("group %s is %d records behind on the source", f.group, lag)
	f.failover()
	f.check(f.finish(nil), fmt.Sprintf("; lag at failover %d", lag))
}

// TestIntegrationFailoverFailback is case (g), issue 3 item 7: case (a)
// followed by the way back: source -> target -> source, nothing missing and
// nothing twice over all three phases.
func TestIntegrationFailoverFailback(t *testing.T) {
	beside(t)
	f := newFailover(t, variant{})
	f.run()
	f.failover()
	f.failback()
	o := f.finish(nil)
	f.check(o, fmt.Sprintf("; deliveries: %d on %s, %d on %s", f.ty.delivered(f.e.src), f.e.src, f.ty.delivered(f.e.dst), f.e.dst))
}

func strPtr(s string) *string { return &s }

// logOffsetMap logs mm2go's offset map of the flow from source for topic,
// decoded with offsetmap.Decode: the segments (runs of contiguously
// copied records) and positions per partition, to explain a failure.
func logOffsetMap(t *testing.T, source, topic string) {
	t.Helper()
	mapTopic := offsetmap.Topic(source)
	byPart := make(map[int32][]string)
	for _, rs := range readAll(t, targetSeeds, mapTopic) {
		for _, r := range rs {
			m, err := offsetmap.Decode(r.Key, r.Value)
			require.NoError(t, err, "offset map record %s[%d]@%d", mapTopic, r.Partition, r.Offset)
			switch {
			case m.Segment != nil && m.Segment.Topic == topic:
				byPart[m.Segment.Partition] = append(byPart[m.Segment.Partition], fmt.Sprintf("@%d %s deleted=%v", r.Offset, m.Segment, m.Deleted))
			case m.Position != nil && m.Position.Topic == topic:
				byPart[m.Position.Partition] = append(byPart[m.Position.Partition], fmt.Sprintf("@%d %s deleted=%v", r.Offset, m.Position, m.Deleted))
			}
		}
	}
	for p := int32(0); p < int32(len(byPart)); p++ {
		t.Logf("offset map of %s[%d]:\n  %s", topic, p, strings.Join(byPart[p], "\n  "))
	}
}

// compactedAway reads topic on the source and returns how many offsets
// below each partition's last record hold no record: what the cleaner
// removed.
func compactedAway(t *testing.T, topic string) int64 {
	t.Helper()
	var n int64
	for _, rs := range readAll(t, sourceSeeds, topic) {
		if len(rs) > 0 {
			n += rs[len(rs)-1].Offset + 1 - int64(len(rs))
		}
	}
	return n
}

// checkCheckpoints reads <src>.checkpoints.internal on the target, decodes
// every record as MM2's tools would (policy.DecodeCheckpoint) and
// checks the group's checkpoints of topic: monotonic per partition (the
// group never rewound), one per partition of the topic, none beyond the
// remote partition's end, and the group's synced offsets on the target
// equal to the last checkpoints. It returns the last checkpoint per
// partition.
func checkCheckpoints(t *testing.T, e *env, group, topic string, partitions int) map[int32]policy.Checkpoint {
	t.Helper()
	remote := e.remote(topic)
	cpTopic := policy.New(policy.KindDefault, ".", true, e.src).CheckpointsTopic(e.src)
	// The sync commits a group's offsets as soon as replication passed
	// them; the checkpoints follow at the next emit.checkpoints.interval:
	// wait until the last ones are those of the synced offsets.
	settled := func() bool {
		last := lastCheckpoints(t, e, group, remote)
		synced := groupOffsets(t, e.dstAdm, e.dst, group)
		for p, cp := range last {
			if synced[partKey{e.dst, remote, p}] != cp.DownstreamOffset {
				return false
			}
		}
		return len(last) == partitions
	}
	eventually(t, 30*time.Second, "checkpoints of "+group+" at its synced offsets", settled)
	recs := readAll(t, targetSeeds, cpTopic)
	ends := endsOf(t, e.dstAdm, e.dst, remote)
	last := make(map[int32]policy.Checkpoint)
	var n, decoded int
	for _, rs := range recs {
		for _, r := range rs {
			cp, err := policy.DecodeCheckpoint(r.Key, r.Value)
			require.NoError(t, err, "checkpoint record %s[%d]@%d", cpTopic, r.Partition, r.Offset)
			decoded++
			if cp.Group != group || cp.Topic != remote {
				continue
			}
			n++
			if prev, ok := last[cp.Partition]; ok {
				require.GreaterOrEqual(t, cp.UpstreamOffset, prev.UpstreamOffset, "checkpoints of %s[%d] monotonic upstream: %s after %s", remote, cp.Partition, cp, prev)
				require.GreaterOrEqual(t, cp.DownstreamOffset, prev.DownstreamOffset, "checkpoints of %s[%d] monotonic downstream: %s after %s", remote, cp.Partition, cp, prev)
			}
			require.LessOrEqual(t, cp.DownstreamOffset, ends[partKey{e.dst, remote, cp.Partition}], "checkpoint %s beyond the remote end", cp)
			last[cp.Partition] = cp
		}
	}
	require.Len(t, last, partitions, "partitions of %s with checkpoints of group %s", remote, group)
	synced := groupOffsets(t, e.dstAdm, e.dst, group)
	for p, cp := range last {
		k := partKey{e.dst, remote, p}
		require.Equal(t, cp.DownstreamOffset, synced[k], "synced offset of %s equals the last checkpoint %s", k, cp)
		require.LessOrEqual(t, synced[k], ends[k], "no negative lag on %s", k)
	}
	t.Logf("%d checkpoint records decoded, %d of group %s on %s, monotonic; synced offsets equal the last ones", decoded, n, group, remote)
	return last
}

// checkOffsetSyncs reads MM2's offset-syncs topic on the cluster
// at seeds, decodes every record with policy.DecodeOffsetSync and checks
// each sync of topic against the data: the source record at the upstream
// offset was copied to the downstream offset of the remote topic. It
// returns the number of syncs of topic.
func checkOffsetSyncs(t *testing.T, e *env, seeds []string, syncTopic, topic string) int {
	t.Helper()
	src := readAll(t, sourceSeeds, topic)
	dst := readAll(t, targetSeeds, e.remote(topic))
	valueAt := func(m map[int32][]*kgo.Record, p int32, off int64) ([]byte, bool) {
		rs := m[p]
		i := sort.Search(len(rs), func(i int) bool { return rs[i].Offset >= off })
		if i < len(rs) && rs[i].Offset == off {
			return rs[i].Value, true
		}
		return nil, false
	}
	var n int
	parts := make(map[int32]bool)
	for _, rs := range readAll(t, seeds, syncTopic) {
		// Every record must decode, whatever its topic.
		for _, r := range rs {
			s, err := policy.DecodeOffsetSync(r.Key, r.Value)
			require.NoError(t, err, "offset sync record %s[%d]@%d", syncTopic, r.Partition, r.Offset)
			if s.Topic != topic {
				continue // the heartbeats topic is replicated too
			}
			n++
			parts[s.Partition] = true
			up, ok := valueAt(src, s.Partition, s.UpstreamOffset)
			require.True(t, ok, "%s: no source record at the upstream offset", s)
			down, ok := valueAt(dst, s.Partition, s.DownstreamOffset)
			require.True(t, ok, "%s: no remote record at the downstream offset", s)
			require.Equal(t, string(up), string(down), "%s: the record at the downstream offset is the copy of the upstream one", s)
		}
	}
	require.NotEmpty(t, parts, "offset syncs in %s", syncTopic)
	t.Logf("%d offset syncs in %s decoded, for %d partitions, each pointing at the copy of its record", n, syncTopic, len(parts))
	return n
}

// copyCounts compares topic on the source with its remote topic on the
// target by value (the records carry unique ids), logs sent, received,
// missing and duplicates, and asserts that every source record was copied
// exactly once.
func copyCounts(t *testing.T, e *env, topic string) {
	t.Helper()
	sent := make(map[string]bool)
	for _, rs := range readAll(t, sourceSeeds, topic) {
		for _, r := range rs {
			sent[string(r.Value)] = true
		}
	}
	got := make(map[string]int)
	var received, dups, missing int
	for _, rs := range readAll(t, targetSeeds, e.remote(topic)) {
		for _, r := range rs {
			received++
			if got[string(r.Value)]++; got[string(r.Value)] > 1 {
				dups++
			}
		}
	}
	for v := range sent {
		if got[v] == 0 {
			missing++
		}
	}
	t.Logf("sent %d, received %d on %s, missing %d, duplicates %d", len(sent), received, e.remote(topic), missing, dups)
	require.Zero(t, missing, "records not copied")
	require.Zero(t, dups, "records copied twice")
	require.Equal(t, len(sent), received, "records on the target that are not on the source")
}

// commitAt commits group's offsets on the source: ends per partition of
// topic.
func commitAt(t *testing.T, adm *kadm.Client, group string, ends map[partKey]int64) {
	t.Helper()
	offs := make(kadm.Offsets)
	for k, v := range ends {
		offs.Add(kadm.Offset{Topic: k.topic, Partition: k.part, At: v, LeaderEpoch: -1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CommitOffsets(ctx, group, offs)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
}

// TestIntegrationFailoverCheckpoints is MM2's checkpoint checks
// (MirrorConnectorsIntegrationBaseTest's testReplicationWithEmptyPartition and testOneWayReplicationWithAutoOffsetSync
// made exact): a 10-partition topic with data in 9; the group commits the
// source's end offsets (0 on the empty partition) before mm2go starts and
// again after more records. While mm2go catches up, every synced target
// offset must stay at or below the remote partition's end (no negative
// lag); at the end the checkpoints are monotonic, the empty partition is
// checkpointed and synced as 0, and the synced offsets are the remote ends.
func TestIntegrationFailoverCheckpoints(t *testing.T) {
	beside(t)
	e := newEnv(t)
	tp := e.topic("ten")
	e.createTopic(tp, 10, nil)
	group := "g" + e.id
	remote := e.remote(tp)
	p := newProducer(t, workload{})
	d := dest{alias: e.src, cl: e.srcCl, topic: tp, parts: 9} // partition 9 stays empty
	p.bulk(d, 20_000)
	first := endsOf(t, e.srcAdm, e.src, tp)
	commitAt(t, e.srcAdm, group, first)

	// Offsets here translate 1:1 (a plain topic copied from offset 0): no
	// fencing, whose abort markers would shift the remote offsets.
	cfg := flowConfig(e, "mm2.properties", e.src, e.dst, "!mm2go.copy.fencing", "mm2go.copy.fencing = none")
	mm := e.start(mmArgs(cfg)...)
	// The group never consumes while mm2go runs: the exact sync commits its
	// offsets once a consumer of it started on the target.
	knockTarget(t, e, group, remote)
	var samples, nonZero int
	sample := func() map[partKey]int64 {
		// Offsets first, then ends: ends only grow, so an offset above a
		// later end was above the end when it was read.
		offs := groupOffsets(t, e.dstAdm, e.dst, group)
		ends, err := tryEndsOf(e.dstAdm, e.dst, remote)
		if err != nil {
			require.Empty(t, offs, "group %s has offsets on %s before the topic exists (%v)", group, remote, err)
			return offs
		}
		samples++
		for k, o := range offs {
			require.Equal(t, remote, k.topic, "group %s has offsets on other topics on the target", group)
			require.LessOrEqual(t, o, ends[k], "negative lag: synced offset of %s is %d, the remote end %d", k, o, ends[k])
			if o > 0 {
				nonZero++
			}
		}
		return offs
	}
	// Exactly-once flows end every copy step with a commit marker in each
	// partition it wrote: the translation of a source end is then the
	// offset of the marker after the last copy, one below the remote end.
	translated := func(src map[partKey]int64) map[partKey]int64 {
		if !exactlyOnce() {
			return src
		}
		var dst map[partKey]int64
		eventually(t, time.Minute, "every record of "+tp+" copied", func() bool {
			per, err := ktest.RecordsPer(e.ctx(), e.dstAdm, remote)
			if err != nil {
				return false
			}
			for k, v := range src {
				if per[k.part] != v {
					return false
				}
			}
			dst, err = tryEndsOf(e.dstAdm, e.dst, remote)
			return err == nil
		})
		out := make(map[partKey]int64)
		for k, v := range src {
			if v > 0 {
				v = dst[partKey{e.dst, remote, k.part}] - 1
			}
			out[k] = v
		}
		return out
	}
	synced := func(want map[partKey]int64) func() bool {
		return func() bool {
			offs := sample()
			for k, v := range want {
				if o, ok := offs[partKey{e.dst, remote, k.part}]; !ok || o != v {
					return false
				}
			}
			return true
		}
	}
	eventually(t, 60*time.Second, "first offsets synced", synced(translated(first)))
	// mm2go stops; more records arrive and the group commits the new ends
	// before mm2go is back, so the first checkpoints after the restart may
	// see the group ahead of what is replicated.
	require.Equal(t, 0, mm.stop(t, syscall.SIGTERM, 30*time.Second))
	p.bulk(d, 10_000)
	second := endsOf(t, e.srcAdm, e.src, tp)
	commitAt(t, e.srcAdm, group, second)
	e.start(mmArgs(cfg)...)
	secondDown := translated(second)
	eventually(t, 90*time.Second, "synced offsets at the new remote ends", synced(secondDown))
	took := waitFailoverCheck(t, cfg, e.src+"->"+e.dst, group, 60*time.Second)
	last := checkCheckpoints(t, e, group, tp, 10)
	require.Equal(t, policy.Checkpoint{Group: group, Topic: remote, Partition: 9}, last[9], "the empty partition is checkpointed as 0")
	var moved int
	for part, cp := range last {
		k := partKey{e.src, tp, part}
		require.Equal(t, second[k], cp.UpstreamOffset, "last checkpoint of %s", k)
		require.Equal(t, secondDown[k], cp.DownstreamOffset, "a plain topic copied from offset 0 translates 1:1, or to the last commit marker (%s)", k)
		if first[k] != second[k] {
			moved++
		}
	}
	require.Equal(t, 9, moved)
	copyCounts(t, e, tp)
	syncs := checkOffsetSyncs(t, e, sourceSeeds, policy.New(policy.KindDefault, ".", true, e.src).OffsetSyncsTopic(e.dst), tp)
	t.Logf("sent 30000 records to 9 of 10 partitions; %d lag samples (%d non-zero offsets), none negative; failover check passed after %.1fs; %d offset syncs",
		samples, nonZero, took.Seconds(), syncs)
}

// TestIntegrationFailoverNoOffsetSyncs is MM2's
// testReplicationWithoutOffsetSyncWillNotCreateOffsetSyncsTopic:
// emit.offset-syncs.enabled=false copies the data but creates no
// mm2-offset-syncs.<dst>.internal on the source (and, as MM2 runs no
// checkpoint connector then, no checkpoints topic).
func TestIntegrationFailoverNoOffsetSyncs(t *testing.T) {
	beside(t)
	e := newEnv(t)
	tp := e.topic("nosyncs")
	e.createTopic(tp, 3, nil)
	p := newProducer(t, workload{})
	p.bulk(dest{alias: e.src, cl: e.srcCl, topic: tp, parts: 3}, 3000)
	commitAt(t, e.srcAdm, "g"+e.id, endsOf(t, e.srcAdm, e.src, tp))
	cfg := flowConfig(e, "mm2.properties", e.src, e.dst, "emit.offset-syncs.enabled = false",
		"!offset-syncs.topic.replication.factor", "!sync.group.offsets.enabled", "!sync.group.offsets.interval.seconds")
	e.start(mmArgs(cfg)...)
	eventually(t, 60*time.Second, "3000 records copied", func() bool { return records(t, e.dstAdm, e.remote(tp)) == 3000 })
	// Progress stored: the copy path has run completely at least once.
	eventually(t, 30*time.Second, "progress stored", func() bool {
		return records(t, e.dstAdm, policy.ConnectOffsetsTopic(e.src)) > 0
	})
	pol := policy.New(policy.KindDefault, ".", true, e.src)
	ctx := e.ctx()
	srcTopics, err := e.srcAdm.ListTopics(ctx)
	require.NoError(t, err)
	dstTopics, err := e.dstAdm.ListTopics(ctx)
	require.NoError(t, err)
	require.False(t, srcTopics.Has(pol.OffsetSyncsTopic(e.dst)), "%s on the source", pol.OffsetSyncsTopic(e.dst))
	require.False(t, dstTopics.Has(pol.OffsetSyncsTopic(e.src)), "%s on the target", pol.OffsetSyncsTopic(e.src))
	require.False(t, dstTopics.Has(pol.CheckpointsTopic(e.src)), "%s on the target", pol.CheckpointsTopic(e.src))
	copyCounts(t, e, tp)
	t.Logf("sent 3000, replicated %d; no offset-syncs topic on either cluster, no checkpoints topic", records(t, e.dstAdm, e.remote(tp)))
}

// TestIntegrationFailoverOffsetSyncsOnTarget is MM2's
// testOffsetSyncsTopicsOnTarget: with
// <src>-><dst>.offset-syncs.topic.location=target the syncs are written to
// mm2-offset-syncs.<src>.internal on the target (decoded and checked against
// the data), the source gets no syncs topic, and the group is checkpointed
// and can fail over.
func TestIntegrationFailoverOffsetSyncsOnTarget(t *testing.T) {
	beside(t)
	e := newEnv(t)
	tp := e.topic("synctarget")
	e.createTopic(tp, 3, nil)
	group := "g" + e.id
	p := newProducer(t, workload{})
	p.bulk(dest{alias: e.src, cl: e.srcCl, topic: tp, parts: 3}, 3000)
	commitAt(t, e.srcAdm, group, endsOf(t, e.srcAdm, e.src, tp))
	cfg := flowConfig(e, "mm2.properties", e.src, e.dst, e.src+"->"+e.dst+".offset-syncs.topic.location = target")
	e.start(mmArgs(cfg)...)
	knockTarget(t, e, group, e.remote(tp)) // the group never consumed while mm2go ran
	took := waitFailoverCheck(t, cfg, e.src+"->"+e.dst, group, 60*time.Second)
	pol := policy.New(policy.KindDefault, ".", true, e.src)
	syncs := checkOffsetSyncs(t, e, targetSeeds, pol.OffsetSyncsTopic(e.src), tp)
	checkCheckpoints(t, e, group, tp, 3)
	srcTopics, err := e.srcAdm.ListTopics(e.ctx())
	require.NoError(t, err)
	require.False(t, srcTopics.Has(pol.OffsetSyncsTopic(e.src)), "%s on the source", pol.OffsetSyncsTopic(e.src))
	require.False(t, srcTopics.Has(pol.OffsetSyncsTopic(e.dst)), "%s on the source", pol.OffsetSyncsTopic(e.dst))
	copyCounts(t, e, tp)
	t.Logf("sent 3000, replicated %d; %d offset syncs on the target; failover check passed after %.1fs",
		records(t, e.dstAdm, e.remote(tp)), syncs, took.Seconds())
}
