package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// latLoad is a steady load of the latency phase: records per second and
// the value size of each.
type latLoad struct {
	rate, valueSize int
}

// String is the load as the flag writes it and the report names it.
func (l latLoad) String() string { return fmt.Sprintf("%dx%d", l.rate, l.valueSize) }

// parseLoads parses a comma-separated list of RATExBYTES loads.
func parseLoads(s string) ([]latLoad, error) {
	var out []latLoad
	for f := range strings.SplitSeq(s, ",") {
		r, v, ok := strings.Cut(strings.TrimSpace(f), "x")
		rate, err1 := strconv.Atoi(r)
		size, err2 := strconv.Atoi(v)
		if !ok || err1 != nil || err2 != nil || rate < 1 || size < 16 {
			return nil, fmt.Errorf("%q is not RATExBYTES (records per second, value bytes of at least 16)", f)
		}
		out = append(out, latLoad{rate: rate, valueSize: size})
	}
	return out, nil
}

// latency runs contender c (nil: no replicator, the consumer reads the
// source topic) while a producer writes a steady load (records/s of values
// of a size) to a fresh source topic, each record carrying its send time in
// a header. A consumer of the target topic takes arrival minus send time for
// every record. The window starts latWarmup after the first record arrived
// and lasts latDuration; every record sent in it must arrive.
func (b *bench) latency(ctx context.Context, c *contender, round int, load latLoad, profile bool) (res runResult) {
	name := direct
	if c != nil {
		name = c.name
	}
	id := newID()
	l := launch{src: "s" + id, dst: "t" + id, topic: "lat" + id}
	l.remote = l.src + "." + l.topic
	phase := "latency"
	if profile {
		phase = "profile-latency"
	}
	res = runResult{Phase: phase, Contender: name, Round: round, Load: load, Syncs: -1}
	l.dir = filepath.Join(b.out, "runs", fmt.Sprintf("%s-%s-%s-r%d-%s", phase, load, name, round, id))
	defer func() {
		b.cleanup(context.WithoutCancel(ctx), l)
		if _, err := b.srcAdm.DeleteTopics(context.WithoutCancel(ctx), l.topic); err != nil {
			b.logf("cleanup: delete %s: %v", l.topic, err)
		}
		res.LoadAfter = loadAvg()
	}()
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		res.Err = err.Error()
		return res
	}
	parts := int32(b.o.partitions)
	if _, err := b.srcAdm.CreateTopic(ctx, parts, 1, nil, l.topic); err != nil {
		res.Err = fmt.Sprintf("create %s: %v", l.topic, err)
		return res
	}
	readSeeds, readTopic := b.dstSeeds, l.remote
	if c == nil {
		readSeeds, readTopic = b.srcSeeds, l.topic
	}

	res.LoadBefore = loadAvg()
	res.Start = time.Now()
	var p *proc
	if c != nil {
		cmd, err := b.command(ctx, c, l)
		if err != nil {
			res.Err = err.Error()
			return res
		}
		if p, err = startProc(cmd, l.dir); err != nil {
			res.Err = err.Error()
			return res
		}
		defer func() {
			took, killed := p.stop(b.o.stopTimeout)
			b.logf("%s stopped in %.1fs (killed=%v)", name, took.Seconds(), killed)
		}()
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rcv := &receiver{partitions: int(parts), seen: map[int32]bool{}}
	cons, err := kgo.NewClient(kgo.SeedBrokers(readSeeds...), kgo.ConsumeTopics(readTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(100*time.Millisecond),
		kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		res.Err = err.Error()
		return res
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.srcSeeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()), kgo.ProducerLinger(0))
	if err != nil {
		cons.Close()
		res.Err = err.Error()
		return res
	}
	snd := &sender{cl: prod, topic: l.topic, partitions: parts, rate: load.rate, shape: b.shapeFor(load.valueSize)}
	var wg sync.WaitGroup
	wg.Go(func() { rcv.consume(ctx, cons) })
	wg.Go(func() { snd.run(ctx) })
	defer func() {
		cancel()
		wg.Wait()
		prod.Close()
		cons.Close()
	}()

	// Wait for the first arrival, then the warm-up; then measure.
	firstDeadline := time.Now().Add(2 * time.Minute)
	for rcv.first.Load() == 0 {
		if time.Now().After(firstDeadline) || ctx.Err() != nil || (p != nil && p.exited()) {
			res.Err = "not every partition delivered a record on the target within 2m"
			if p != nil {
				res.Err += "; log tail:\n" + b.logTail(l.dir)
			}
			return res
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	winStart := time.Unix(0, rcv.first.Load()).Add(b.o.latWarmup)
	sleepCtx(ctx, time.Until(winStart))
	var cpu0 procSample
	if p != nil {
		cpu0, _ = readProc(p.pid(), b.ticks)
	}
	var perfRec *exec.Cmd
	if profile && p != nil {
		perfRec = exec.Command("perf", "record", "-F", "499", "-g", "-o", filepath.Join(l.dir, "perf.data"), "-p", strconv.Itoa(p.pid()))
		perfRec.Stdout, perfRec.Stderr = p.log, p.log
		if err := perfRec.Start(); err != nil {
			res.Err = fmt.Sprintf("start perf: %v", err)
			return res
		}
	}
	// The window opens a moment after it is set: a record stamped from its
	// start on is then stamped after the sender can see it, so the sender
	// counts every record the receiver will (one set at once raced with a
	// record stamped in between: counted on arrival only).
	winStart = time.Now().Add(time.Millisecond)
	snd.window(winStart.UnixNano(), winStart.Add(b.o.latDuration).UnixNano())
	sleepCtx(ctx, time.Until(winStart.Add(b.o.latDuration)))
	winEnd := time.Now()
	if perfRec != nil {
		_ = perfRec.Process.Signal(syscall.SIGINT)
		_ = perfRec.Wait()
		b.perfReport(ctx, l.dir, name+"-latency")
	}
	if p != nil {
		if s, err := readProc(p.pid(), b.ticks); err == nil {
			res.LatCPUPct = 100 * (s.CPU - cpu0.CPU).Seconds() / winEnd.Sub(winStart).Seconds()
			res.PeakRSS = s.HWM
		}
	}
	snd.stop.Store(true)
	if err := prod.Flush(ctx); err != nil {
		res.Err = fmt.Sprintf("flush producer: %v", err)
		return res
	}
	if err := snd.err(); err != nil {
		res.Err = err.Error()
		return res
	}
	want := snd.inWindow.Load()
	arriveBy := time.Now().Add(30 * time.Second)
	lo, hi := snd.winLo.Load(), snd.winHi.Load()
	for rcv.count(lo, hi) < want && time.Now().Before(arriveBy) {
		sleepCtx(ctx, 50*time.Millisecond)
	}
	lat := rcv.latencies(lo, hi, filepath.Join(l.dir, "latency.csv"))
	if int64(len(lat)) != want {
		res.Err = fmt.Sprintf("%d records sent in the window arrived, %d were sent, %d arrived more than once", len(lat), want, rcv.duplicates(lo, hi))
		return res
	}
	if want == 0 {
		res.Err = "no record sent in the window"
		return res
	}
	res.Records = want
	res.Bytes = want * recordBytes(load.valueSize)
	res.RunBytes = snd.sent.Load() * recordBytes(load.valueSize)
	res.Wall = winEnd.Sub(winStart)
	res.P50, res.P99, res.PMax = percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1]
	if sent := snd.sentRate(); sent < 0.95*float64(load.rate) {
		res.Note = fmt.Sprintf("producer reached only %.0f records/s", sent)
	}
	res.OK = true
	return res
}

// sleepCtx waits for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// sender writes records at a steady rate until stopped, each with its send
// time in a header.
type sender struct {
	cl         *kgo.Client
	topic      string
	partitions int32
	rate       int // records per second
	shape      *shape

	stop         atomic.Bool
	winLo, winHi atomic.Int64 // measurement window, Unix nanoseconds
	inWindow     atomic.Int64 // records sent within the window
	failed       atomic.Value
	sent         atomic.Int64
	elapsed      atomic.Int64
}

func (s *sender) window(lo, hi int64) {
	s.winHi.Store(hi)
	s.winLo.Store(lo)
}

func (s *sender) err() error {
	err, _ := s.failed.Load().(error)
	return err
}

func (s *sender) sentRate() float64 {
	return ratio(float64(s.sent.Load()), time.Duration(s.elapsed.Load()).Seconds())
}

// run paces the producer: every millisecond it sends what is due at rate
// records per second since the start.
func (s *sender) run(ctx context.Context) {
	rate := float64(s.rate)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	t0 := time.Now()
	var i int64
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			s.failed.CompareAndSwap(nil, err)
		}
	}
	for !s.stop.Load() {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		el := time.Since(t0)
		s.elapsed.Store(int64(el))
		for due := int64(el.Seconds() * rate); i < due && !s.stop.Load(); i++ {
			r := s.shape.record(s.topic, i, s.partitions)
			now := time.Now().UnixNano()
			r.Headers[0] = kgo.RecordHeader{Key: headerSent, Value: binary.BigEndian.AppendUint64(nil, uint64(now))}
			if lo, hi := s.winLo.Load(), s.winHi.Load(); lo > 0 && now >= lo && now < hi {
				s.inWindow.Add(1)
			}
			s.cl.Produce(ctx, r, promise)
			s.sent.Add(1)
		}
	}
}

// receiver records send time and latency of every record it reads.
type receiver struct {
	partitions int
	// first is when every partition had delivered a record, Unix
	// nanoseconds. A partition of a new topic can start seconds after the
	// others (its leader is elected late), which is not what the latency
	// phase measures.
	first atomic.Int64

	mu   sync.Mutex
	seen map[int32]bool
	sent []int64
	lat  []time.Duration
}

func (r *receiver) consume(ctx context.Context, cl *kgo.Client) {
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		now := time.Now().UnixNano()
		r.mu.Lock()
		fs.EachRecord(func(rec *kgo.Record) {
			r.seen[rec.Partition] = true
			for _, h := range rec.Headers {
				if h.Key == headerSent && len(h.Value) == 8 {
					sent := int64(binary.BigEndian.Uint64(h.Value))
					r.sent = append(r.sent, sent)
					r.lat = append(r.lat, time.Duration(now-sent))
				}
			}
		})
		if len(r.seen) == r.partitions {
			r.first.CompareAndSwap(0, now)
		}
		r.mu.Unlock()
	}
}

// count returns how many records sent in [lo, hi) arrived.
func (r *receiver) count(lo, hi int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, s := range r.sent {
		if s >= lo && s < hi {
			n++
		}
	}
	return n
}

// duplicates returns how many records sent in [lo, hi) arrived more than
// once (each record's send time, in nanoseconds, is its own).
func (r *receiver) duplicates(lo, hi int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[int64]int{}
	n := 0
	for _, s := range r.sent {
		if s >= lo && s < hi {
			if seen[s]++; seen[s] == 2 {
				n++
			}
		}
	}
	return n
}

// latencies returns the sorted latencies of the records sent in [lo, hi)
// and writes their timeline to path: per 100 ms of send time, the count and
// the p50, p99 and max latency.
func (r *receiver) latencies(lo, hi int64, path string) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	const bucket = int64(100 * time.Millisecond)
	buckets := make([][]time.Duration, (hi-lo+bucket-1)/bucket)
	var out []time.Duration
	for i, s := range r.sent {
		if s >= lo && s < hi {
			out = append(out, r.lat[i])
			k := (s - lo) / bucket
			buckets[k] = append(buckets[k], r.lat[i])
		}
	}
	slices.Sort(out)
	var tl strings.Builder
	tl.WriteString("t_ms,records,p50_ms,p99_ms,max_ms\n")
	for k, v := range buckets {
		slices.Sort(v)
		fmt.Fprintf(&tl, "%d,%d,%.2f,%.2f,%.2f\n", int64(k)*bucket/int64(time.Millisecond), len(v),
			ms(percentile(v, 50)), ms(percentile(v, 99)), ms(percentile(v, 100)))
	}
	_ = os.WriteFile(path, []byte(tl.String()), 0o644)
	return out
}
