package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/ktest"
)

// The failover tests drive the seed scenario with three actors: a producer
// that writes records with unique ids and can be switched between clusters,
// a consumer group with manual commits that can be stopped on one cluster
// and started on the other, and the mm2go binary. Everything a record went
// through is recorded, so that the counts at the end (sent, received,
// missing, duplicates) can name the partition and offset of every record at
// fault.

// partKey names a partition of a topic on one of the two clusters.
type partKey struct {
	alias string // cluster alias (the test's src or dst)
	topic string
	part  int32
}

func (k partKey) String() string { return fmt.Sprintf("%s:%s[%d]", k.alias, k.topic, k.part) }

// recPos is a record's position.
type recPos struct {
	partKey
	off int64
}

func (a recPos) String() string { return fmt.Sprintf("%s@%d", a.partKey, a.off) }

// flowConfig writes an MM2 properties file named name for the flow
// from->to (both test aliases) with the test's topics, test-friendly
// intervals, group-offset sync on, plus extra lines, and returns its path.
// The other direction is disabled. An extra line "!key" removes the line
// of key.
func flowConfig(e *env, name, from, to string, extra ...string) string {
	e.t.Helper()
	lines := []string{
		"clusters = " + e.src + ", " + e.dst,
		copyModeLine(e.src, e.dst),
		fencingLine(),
		e.src + ".bootstrap.servers = " + strings.Join(sourceSeeds, ","),
		e.dst + ".bootstrap.servers = " + strings.Join(targetSeeds, ","),
		from + "->" + to + ".enabled = true",
		from + "->" + to + ".topics = t" + e.id + "-.*",
		to + "->" + from + ".enabled = false",
		"replication.factor = 1",
		"offset-syncs.topic.replication.factor = 1",
		"checkpoints.topic.replication.factor = 1",
		"heartbeats.topic.replication.factor = 1",
		e.src + ".offset.storage.replication.factor = 1",
		e.dst + ".offset.storage.replication.factor = 1",
		e.src + ".offset.flush.interval.ms = 500",
		e.dst + ".offset.flush.interval.ms = 500",
		"refresh.topics.interval.seconds = 1",
		"refresh.groups.interval.seconds = 1",
		// The clusters are shared: replicating every heartbeats topic
		// found there (MM2's default, whatever the topics filter says)
		// would copy other tests' remote heartbeats topics back and forth
		// with every reverse flow, multiplying them.
		"heartbeats.replication.enabled = false",
		"emit.heartbeats.enabled = false",
		"emit.checkpoints.interval.seconds = 1",
		"sync.group.offsets.enabled = true",
		"sync.group.offsets.interval.seconds = 1",
	}
	for _, x := range extra {
		if key, ok := strings.CutPrefix(x, "!"); ok {
			lines = slices.DeleteFunc(lines, func(l string) bool { return strings.HasPrefix(l, key+" =") })
			continue
		}
		lines = append(lines, x)
	}
	path := filepath.Join(e.dir, name)
	require.NoError(e.t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	return path
}

// runCmd runs the mm2go binary to completion and returns its exit code and
// combined output.
func runCmd(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run mm2go %v: %v", args, err)
	}
	if ee != nil {
		return ee.ExitCode(), string(out)
	}
	return 0, string(out)
}

// waitFailoverCheck runs `mm2go failover check --wait` until it exits 0
// and returns how long that took. On timeout it fails the test with the
// check's output and that of `mm2go offsets translate`.
func waitFailoverCheck(t *testing.T, cfg, flow, group string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "failover", "check", "-c", cfg, "--flow", flow, "--group", group,
		"--wait", "--timeout", timeout.String()).CombinedOutput()
	took := time.Since(start)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run mm2go failover check: %v", err)
	}
	if err != nil {
		_, tr := runCmd(t, "offsets", "translate", "-c", cfg, "--flow", flow, "--group", group, "--timeout", "20s")
		t.Fatalf("failover check --wait of %s for group %s not safe after %s (exit %d); output:\n%s\noffsets translate:\n%s", flow, group, took, ee.ExitCode(), out, tr)
	}
	require.Contains(t, string(out), "SAFE to switch consumers")
	return took
}

// waitFailoverRefused waits until `failover check` fails for reason only
// (every failing line names it) and the target group's offsets were
// committed, and returns its output.
func waitFailoverRefused(t *testing.T, cfg, flow, group, reason string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var out string
	for {
		var code int
		code, out = runCmd(t, "failover", "check", "-c", cfg, "--flow", flow, "--group", group, "--timeout", "20s")
		require.NotEqual(t, 0, code, "failover check must not pass:\n%s", out)
		only := strings.Contains(out, reason)
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "  ") && !strings.Contains(line, reason) {
				only = false
			}
		}
		if only {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("failover check of %s for group %s did not settle on %s after %s; last output:\n%s", flow, group, reason, timeout, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// endsOf lists the high watermarks of topics, which must exist.
func endsOf(t *testing.T, adm *kadm.Client, alias string, topics ...string) map[partKey]int64 {
	t.Helper()
	out, err := tryEndsOf(adm, alias, topics...)
	require.NoError(t, err)
	return out
}

// dataEnds lowers each end offset past the control records that end its
// partition (the abort markers a fencing writer puts into the remote
// partitions when it starts) to one past the partition's last record: a
// consumer that read everything got that far.
func dataEnds(t *testing.T, adm *kadm.Client, ends map[partKey]int64) map[partKey]int64 {
	t.Helper()
	const tail = 16
	ranges := make(map[string]map[int32]itopic.Range)
	for k, e := range ends {
		if e > 0 {
			if ranges[k.topic] == nil {
				ranges[k.topic] = make(map[int32]itopic.Range)
			}
			ranges[k.topic][k.part] = itopic.Range{From: max(0, e-tail), To: e}
		}
	}
	out := maps.Clone(ends)
	if len(ranges) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seeds, err := ktest.Seeds(ctx, adm)
	require.NoError(t, err)
	// read_uncommitted: an open transaction of a producer on the topic
	// would hold a read_committed reader below the end for ever. The
	// remote topics hold committed records only (mm2go copies them so).
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.KeepControlRecords(), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	require.NoError(t, err)
	defer cl.Close()
	last := make(map[partKey]int64)
	var alias string
	for k := range ends {
		alias = k.alias
	}
	require.NoError(t, itopic.ReadRanges(ctx, cl, ranges, func(r *kgo.Record) bool {
		if !r.Attrs.IsControl() {
			last[partKey{alias, r.Topic, r.Partition}] = r.Offset + 1
		}
		return true
	}))
	for k, e := range ends {
		if l, ok := last[k]; ok {
			out[k] = l
		} else if e > 0 {
			out[k] = max(0, e-tail) // only control records at the end
		}
	}
	return out
}

// tryEndsOf is endsOf returning the first error.
func tryEndsOf(adm *kadm.Client, alias string, topics ...string) (map[partKey]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %v: %w", topics, err)
	}
	out := make(map[partKey]int64)
	var first error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			if first == nil {
				first = fmt.Errorf("end offset of %s[%d]: %w", o.Topic, o.Partition, o.Err)
			}
			return
		}
		out[partKey{alias, o.Topic, o.Partition}] = o.Offset
	})
	return out, first
}

// groupOffsets returns the committed offsets of group on a cluster.
func groupOffsets(t *testing.T, adm *kadm.Client, alias, group string) map[partKey]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := adm.FetchOffsets(ctx, group)
	require.NoError(t, err)
	out := make(map[partKey]int64)
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At >= 0 {
			out[partKey{alias, o.Topic, o.Partition}] = o.At
		}
	})
	return out
}

// requireCommitted is what a Java consumer with auto.offset.reset=none
// checks at start (kgo's NoResetOffset starts at the log start instead): the
// group must have a committed offset on every partition of topics.
func requireCommitted(t *testing.T, adm *kadm.Client, alias, group string, topics ...string) map[partKey]int64 {
	t.Helper()
	have := groupOffsets(t, adm, alias, group)
	for k := range endsOf(t, adm, alias, topics...) {
		_, ok := have[k]
		require.True(t, ok, "group %s has no committed offset for %s: a consumer with auto.offset.reset=none would fail (committed: %v)", group, k, have)
	}
	return have
}

// dest is where the producer writes.
type dest struct {
	alias string
	cl    *kgo.Client
	topic string
	parts int32
	txn   bool // one transaction per batch
}

// workload says what the producer writes.
type workload struct {
	// batch records per produce call (and per transaction); default 15.
	batch int
	// every is the pause between batches; default 10ms (about 1.5k
	// records/s with the default batch).
	every time.Duration
	// keys > 0 gives record n the key "k<n%keys>" on partition
	// (n%keys)%parts, so compaction has keys to work on; otherwise records
	// go round robin over the partitions.
	keys int
	// tombEvery > 0 (with keys) makes every tombEvery-th record a
	// tombstone (nil value, no id) of its key.
	tombEvery int
	// abortEvery > 0 aborts every abortEvery-th transaction of a
	// transactional destination.
	abortEvery int
}

// producer writes records "id-<n>" with unique n to its current
// destination until stopped. Only acknowledged (and, for transactions,
// committed) records count as sent.
type producer struct {
	t *testing.T
	w workload

	mu         sync.Mutex
	seq        int
	sent       map[int]recPos // committed records with ids
	aborted    map[int]recPos
	tombstones int
	ends       map[partKey]int64 // per partition: offset after the last committed record
	txns       int

	switchc chan dest
	stopc   chan struct{}
	done    chan struct{}
	err     error
}

// newProducerClient creates a producing client for seeds; txnID != ""
// makes it transactional.
func newProducerClient(t *testing.T, seeds []string, txnID string) *kgo.Client {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(2 * time.Millisecond), kgo.MetadataMinAge(100 * time.Millisecond)}
	if txnID != "" {
		opts = append(opts, kgo.TransactionalID(txnID), kgo.TransactionTimeout(30*time.Second))
	}
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// newProducer returns a producer that writes only when asked (write,
// bulk) until start is called.
func newProducer(t *testing.T, w workload) *producer {
	if w.batch == 0 {
		w.batch = 15
	}
	if w.every == 0 {
		w.every = 10 * time.Millisecond
	}
	return &producer{t: t, w: w, sent: make(map[int]recPos), aborted: make(map[int]recPos), ends: make(map[partKey]int64),
		switchc: make(chan dest), stopc: make(chan struct{}), done: make(chan struct{})}
}

// start writes a batch to d every w.every until stop.
func (p *producer) start(d dest) {
	go p.loop(d)
	p.t.Cleanup(p.stop)
}

func (p *producer) loop(d dest) {
	defer close(p.done)
	tick := time.NewTicker(p.w.every)
	defer tick.Stop()
	for {
		select {
		case <-p.stopc:
			return
		case nd := <-p.switchc:
			d = nd
			continue
		case <-tick.C:
		}
		if err := p.write(d, p.w.batch); err != nil {
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
			return
		}
	}
}

// record builds record n for d; it reports a tombstone as such.
func (w workload) record(n int, d dest) (*kgo.Record, bool) {
	r := &kgo.Record{Topic: d.topic}
	if w.keys > 0 {
		k := n % w.keys
		r.Key = []byte("k" + strconv.Itoa(k))
		r.Partition = int32(k) % d.parts
		if w.tombEvery > 0 && n%w.tombEvery == w.tombEvery-1 {
			return r, true
		}
	} else {
		r.Key = []byte("k" + strconv.Itoa(n%1000))
		r.Partition = int32(n % int(d.parts))
	}
	r.Value = []byte("id-" + strconv.Itoa(n))
	return r, false
}

// write produces n records to d synchronously (one transaction for a
// transactional d) and records what was sent. A zero d (paused) writes
// nothing.
func (p *producer) write(d dest, n int) error {
	if d.cl == nil {
		return nil
	}
	p.mu.Lock()
	first := p.seq
	p.seq += n
	p.mu.Unlock()
	recs := make([]*kgo.Record, n)
	tomb := make([]bool, n)
	for i := range n {
		recs[i], tomb[i] = p.w.record(first+i, d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if d.txn {
		if err := d.cl.BeginTransaction(); err != nil {
			return fmt.Errorf("begin transaction on %s: %w", d.alias, err)
		}
	}
	if err := d.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce to %s:%s: %w", d.alias, d.topic, err)
	}
	commit := true
	if d.txn {
		p.mu.Lock()
		p.txns++
		commit = p.w.abortEvery <= 0 || p.txns%p.w.abortEvery != 0
		p.mu.Unlock()
		if err := d.cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			return fmt.Errorf("end transaction on %s (commit %v): %w", d.alias, commit, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range recs {
		pos := recPos{partKey{d.alias, r.Topic, r.Partition}, r.Offset}
		switch {
		case !commit:
			if !tomb[i] {
				p.aborted[first+i] = pos
			}
			continue
		case tomb[i]:
			p.tombstones++
		default:
			p.sent[first+i] = pos
		}
		p.ends[pos.partKey] = max(p.ends[pos.partKey], pos.off+1)
	}
	return nil
}

// switchTo makes the producer write to d from its next batch on; when it
// returns, every record written to the previous destination is
// acknowledged and none will follow.
func (p *producer) switchTo(d dest) {
	p.t.Helper()
	select {
	case p.switchc <- d:
	case <-p.done:
		p.t.Fatalf("producer stopped: %v", p.failure())
	}
}

// pause stops writing until the next switchTo; when it returns, every
// record written is acknowledged.
func (p *producer) pause() { p.switchTo(dest{}) }

// bulk writes n records to d from the calling goroutine in batches of 5000.
func (p *producer) bulk(d dest, n int) {
	p.t.Helper()
	for n > 0 {
		b := min(n, 5000)
		require.NoError(p.t, p.write(d, b))
		n -= b
	}
}

// stop ends the loop started by start and waits for its last batch.
func (p *producer) stop() {
	select {
	case <-p.stopc:
	default:
		close(p.stopc)
	}
	<-p.done
}

func (p *producer) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// endsOf returns the offsets after the last committed record of every
// partition of topic on alias the producer wrote to.
func (p *producer) endsOf(alias, topic string) map[partKey]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[partKey]int64)
	for k, v := range p.ends {
		if k.alias == alias && k.topic == topic {
			out[k] = v
		}
	}
	return out
}

// count returns how many records with ids the producer sent to alias
// ("" for all).
func (p *producer) count(alias string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int
	for _, a := range p.sent {
		if alias == "" || a.alias == alias {
			n++
		}
	}
	return n
}

// tally is every delivery of every consumer of a test, over all phases.
type tally struct {
	mu         sync.Mutex
	got        map[int][]recPos
	tombstones int
	other      []recPos // records without an id
	next       map[partKey]int64
	deliveries map[string]int // per cluster alias
}

func newTally() *tally {
	return &tally{got: make(map[int][]recPos), next: make(map[partKey]int64), deliveries: make(map[string]int)}
}

func (ty *tally) add(alias string, recs []*kgo.Record) {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	for _, r := range recs {
		pos := recPos{partKey{alias, r.Topic, r.Partition}, r.Offset}
		ty.next[pos.partKey] = max(ty.next[pos.partKey], r.Offset+1)
		ty.deliveries[alias]++
		switch id, ok := idOf(r.Value); {
		case r.Value == nil:
			ty.tombstones++
		case ok:
			ty.got[id] = append(ty.got[id], pos)
		default:
			ty.other = append(ty.other, pos)
		}
	}
}

func idOf(v []byte) (int, bool) {
	s, ok := strings.CutPrefix(string(v), "id-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// startAt records where a consumer starts reading: the group's committed
// offsets.
func (ty *tally) startAt(offs map[partKey]int64) {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	for k, o := range offs {
		ty.next[k] = max(ty.next[k], o)
	}
}

func (ty *tally) delivered(alias string) int {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return ty.deliveries[alias]
}

// reached reports whether the consumers have read every partition in ends
// up to its offset, and the first partition that is behind.
func (ty *tally) reached(ends map[partKey]int64) (bool, string) {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	for k, e := range ends {
		if ty.next[k] < e {
			return false, fmt.Sprintf("%s at %d, end %d", k, ty.next[k], e)
		}
	}
	return true, ""
}

// consumer is one member of a consumer group that commits after every poll
// (before its records count as received) and leaves the group when stopped.
type consumer struct {
	t      *testing.T
	alias  string
	cl     *kgo.Client
	ty     *tally
	cancel context.CancelFunc
	done   chan struct{}
	closed sync.Once
	mu     sync.Mutex
	err    error
}

// startConsumer joins group on the cluster at seeds, reading topics with
// read_committed and the given reset offset.
func startConsumer(t *testing.T, seeds []string, alias, group string, reset kgo.Offset, ty *tally, topics ...string) *consumer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topics...),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(reset), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.MetadataMinAge(100*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	c := &consumer{t: t, alias: alias, cl: cl, ty: ty, cancel: cancel, done: make(chan struct{})}
	go c.loop(ctx)
	t.Cleanup(c.stop)
	return c
}

func (c *consumer) loop(ctx context.Context) {
	defer close(c.done)
	fail := func(err error) {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
	}
	for {
		fs := c.cl.PollFetches(ctx)
		if fs.IsClientClosed() {
			return
		}
		var ferr error
		fs.EachError(func(topic string, p int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("fetch %s:%s[%d]: %w", c.alias, topic, p, err)
			}
		})
		if ferr != nil {
			fail(ferr)
			return
		}
		if recs := fs.Records(); len(recs) > 0 {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := c.cl.CommitUncommittedOffsets(cctx)
			cancel()
			if err != nil {
				fail(fmt.Errorf("commit on %s: %w", c.alias, err))
				return
			}
			c.ty.add(c.alias, recs)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func (c *consumer) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// drain waits until the consumer has read (and committed) every partition
// in ends up to its offset.
func (c *consumer) drain(ends map[partKey]int64, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		require.NoError(c.t, c.failure(), "consumer on %s", c.alias)
		ok, behind := c.ty.reached(ends)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("consumer on %s not drained after %s: %s", c.alias, timeout, behind)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends the consumer after its current poll's commit and leaves the
// group; it is idempotent.
func (c *consumer) stop() {
	c.closed.Do(func() {
		c.cancel()
		<-c.done
		c.cl.Close()
	})
}

// outcome is the comparison of what was sent with what was received.
type outcome struct {
	sent, expected, received, deliveries, missing, duplicates, unexpected int
	report                                                                []string
}

// compareIDs counts expected ids that were never received, ids received more
// than once, and ids received that were never sent as committed records
// (aborted ones, for instance); sent are all committed ids, expected those
// that must be received.
func compareIDs(sent map[int]recPos, expected map[int]bool, ty *tally) outcome {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	o := outcome{sent: len(sent), expected: len(expected), received: len(ty.got)}
	var ids []int
	for id := range expected {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		if len(ty.got[id]) == 0 {
			o.missing++
			if o.missing <= 20 {
				o.report = append(o.report, fmt.Sprintf("missing id-%d, sent to %s", id, sent[id]))
			}
		}
	}
	ids = ids[:0]
	for id := range ty.got {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		ds := ty.got[id]
		o.deliveries += len(ds)
		if len(ds) > 1 {
			o.duplicates += len(ds) - 1
			if o.duplicates <= 20 {
				o.report = append(o.report, fmt.Sprintf("id-%d (sent to %s) received %d times: %v", id, sent[id], len(ds), ds))
			}
		}
		if _, ok := sent[id]; !ok {
			o.unexpected++
			if o.unexpected <= 20 {
				o.report = append(o.report, fmt.Sprintf("id-%d was never sent as a committed record but received at %v", id, ds))
			}
		}
	}
	return o
}

// knock starts a consumer of group on the target (made by newClient from
// the options it is given) reading topic with auto.offset.reset=none, as an
// operator switching the group does, and closes it once the group exists
// there. With no committed offset it reads nothing; the empty group it
// leaves behind is what the exact group-offset sync takes as the request
// for the offsets of a group it never saw consume on the source.
func knock(t *testing.T, adm *kadm.Client, group, topic string, newClient func(...kgo.Opt) *kgo.Client) {
	t.Helper()
	cl := newClient(kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()), kgo.DisableAutoCommit())
	ctx, cancel := context.WithCancel(context.Background())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	eventually(t, 30*time.Second, "group "+group+" on the target", func() bool {
		listed, err := adm.ListGroups(context.Background())
		_, ok := listed[group]
		return err == nil && ok
	})
	cancel()
	<-polled
	cl.Close()
}

// knockTarget is knock on the shared test bed's target cluster.
func knockTarget(t *testing.T, e *env, group, topic string) {
	t.Helper()
	knock(t, e.dstAdm, group, topic, func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(targetSeeds...)}, opts...)...)
		require.NoError(t, err)
		return cl
	})
}
