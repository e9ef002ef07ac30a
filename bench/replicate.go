package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/policy"
)

// runResult is one measured run of one contender.
type runResult struct {
	Phase     string // backlog, latency or profile
	Contender string
	Round     int
	OK        bool
	Err       string
	Start     time.Time

	Records int64 // records copied (backlog) or measured (latency)
	Bytes   int64 // payload bytes copied, see recordBytes
	// RunBytes is, in the latency phase, the payload of every record sent
	// during the run (warm-up and window), which the replicator copied;
	// 0 elsewhere, where Bytes is all that was copied.
	RunBytes int64

	Wall  time.Duration // start of the process to the last record on the target
	First time.Duration // start of the process to the first record on the target
	CPU   time.Duration // user+sys of the process (and its reaped children) over Wall
	// PeakRSS is VmHWM of the process at the end of the copy (bytes).
	PeakRSS int64
	// RSSFirst and RSSLast are RSS samples after 25 % and at 100 % of the
	// copy, to show whether memory grows with the backlog.
	RSSQuarter, RSSEnd int64
	// SrcBrokerCPU and DstBrokerCPU are the brokers' CPU over the run.
	SrcBrokerCPU, DstBrokerCPU time.Duration
	// Syncs is the number of records written to MM2's offset-syncs topic
	// on the source (mm2go and MM2 alike), -1 when there is none.
	Syncs int64
	// Verify is how long `mm2go verify` took to compare the copy with the
	// backlog record by record, after an mm2go backlog run; 0 otherwise.
	Verify time.Duration

	// Latency phase.
	Load           latLoad
	P50, P99, PMax time.Duration
	LatCPUPct      float64 // contender CPU during the measured window, % of one core

	LoadBefore, LoadAfter [3]float64
	Note                  string
}

func (r runResult) mbps() float64 { return ratio(float64(r.Bytes)/1e6, r.Wall.Seconds()) }
func (r runResult) rps() float64  { return ratio(float64(r.Records), r.Wall.Seconds()) }
func (r runResult) mbPerCPU() float64 {
	return ratio(float64(r.Bytes)/1e6, r.CPU.Seconds())
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return math.NaN()
	}
	return a / b
}

func (r runResult) summary() string {
	s := fmt.Sprintf("%s %s round %d ok=%v", r.Phase, r.Contender, r.Round, r.OK)
	if strings.HasSuffix(r.Phase, "latency") {
		s += fmt.Sprintf(" n=%d p50=%.1fms p99=%.1fms max=%.1fms cpu=%.0f%%", r.Records,
			ms(r.P50), ms(r.P99), ms(r.PMax), r.LatCPUPct)
	} else {
		s += fmt.Sprintf(" wall=%.2fs %.1f MB/s %.0f rec/s cpu=%.2fs %.1f MB/cpu-s rss=%.0fMiB first=%.2fs brokers cpu=%.1fs+%.1fs",
			r.Wall.Seconds(), r.mbps(), r.rps(), r.CPU.Seconds(), r.mbPerCPU(), float64(r.PeakRSS)/(1<<20),
			r.First.Seconds(), r.SrcBrokerCPU.Seconds(), r.DstBrokerCPU.Seconds())
	}
	s += fmt.Sprintf(" load %.2f->%.2f", r.LoadBefore[0], r.LoadAfter[0])
	if r.Note != "" {
		s += " " + r.Note
	}
	if r.Err != "" {
		s += " ERROR " + r.Err
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// proc is a started contender process.
type proc struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error
}

// startProc starts cmd with its output in dir/process.log.
func startProc(cmd *exec.Cmd, dir string) (*proc, error) {
	return startProcLog(cmd, filepath.Join(dir, "process.log"))
}

// startProcLog starts cmd with its output in the file log.
func startProcLog(cmd *exec.Cmd, log string) (*proc, error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, fmt.Errorf("create process log: %w", err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	p := &proc{cmd: cmd, log: f, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and, after timeout, SIGKILL; it returns how long the
// process took to exit and whether it had to be killed.
func (p *proc) stop(timeout time.Duration) (time.Duration, bool) {
	defer p.log.Close()
	t0 := time.Now()
	if p.exited() {
		return 0, false
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return time.Since(t0), false
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return time.Since(t0), true
	}
}

// brokerCPU returns the CPU time of both brokers so far.
func (b *bench) brokerCPU() (src, dst time.Duration) {
	for i, n := range []string{"bsrc", "bdst"} {
		pid, err := b.tb.brokerPid(n)
		if err != nil {
			continue
		}
		s, err := readProc(pid, b.ticks)
		if err != nil {
			continue
		}
		if i == 0 {
			src = s.CPU
		} else {
			dst = s.CPU
		}
	}
	return src, dst
}

// progress is how much of the source topic a target topic holds.
type progress struct {
	copied   int64
	complete bool // every partition reached the source's end offset
}

// targetProgress lists the end offsets of remote on the target. markers is
// the number of control records a contender writes at the start of each
// remote partition before any record (fencesAtStart), left out of copied:
// otherwise its first record would be the fencing's marker.
func (b *bench) targetProgress(ctx context.Context, remote string, ends map[int32]int64, markers int64) (progress, error) {
	lo, err := b.dstAdm.ListEndOffsets(ctx, remote)
	if err != nil {
		var se *kadm.ShardErrors
		if !errors.As(err, &se) {
			return progress{}, err
		}
	}
	var pr progress
	reached := 0
	for p, o := range lo[remote] {
		if o.Err != nil || p < 0 {
			continue
		}
		pr.copied += max(o.Offset-markers, 0)
		if o.Offset >= ends[p] {
			reached++
		}
	}
	pr.complete = reached == len(ends)
	return pr, nil
}

// replicate runs contender c once over the backlog: start, wait for the
// last record on the target, stop, verify, clean up. With profile, the run
// is recorded by `perf record` and its figures do not count.
func (b *bench) replicate(ctx context.Context, c *contender, round int, profile bool) (res runResult) {
	id := newID()
	l := launch{src: "s" + id, dst: "t" + id, topic: b.src.name, pprof: profile}
	l.remote = l.src + "." + l.topic
	phase := "backlog"
	switch {
	case profile:
		phase = "profile"
	case c.instances > 0:
		phase = "scale"
	case c.throttle > 0:
		phase = "throttle"
	case c.wan:
		phase = "wan"
	case c.eos:
		phase = "eos"
	}
	res = runResult{Phase: phase, Contender: c.name, Round: round, Records: b.src.records, Bytes: b.src.bytes}
	l.dir = filepath.Join(b.out, "runs", fmt.Sprintf("%s-%s-r%d-%s", phase, c.name, round, id))
	defer func() {
		b.cleanup(context.WithoutCancel(ctx), l)
		res.LoadAfter = loadAvg()
	}()
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		res.Err = err.Error()
		return res
	}
	cmds, err := b.commands(ctx, c, l)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	samples, err := os.Create(filepath.Join(l.dir, "samples.csv"))
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer samples.Close()
	fmt.Fprintln(samples, "t_ms,target_records,rss_bytes,cpu_ms")

	res.LoadBefore = loadAvg()
	srcCPU0, dstCPU0 := b.brokerCPU()
	res.Start = time.Now()
	ps, err := startSet(cmds, l.dir, c.cpuQuota, "mm2go-bench-"+id)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		took, killed, exitErr := ps.stop(b.o.stopTimeout)
		switch {
		case killed:
			res.Note += fmt.Sprintf(" killed after %s", b.o.stopTimeout)
		case exitErr != nil && c.kind != kindMM2:
			// A JVM stopped by SIGTERM exits 143; mm2go and the copy loop exit 0.
			res.Note += fmt.Sprintf(" exit: %v", exitErr)
		}
		b.logf("%s stopped in %.1fs", c.name, took.Seconds())
	}
	defer stop()
	var perfRec *exec.Cmd
	if profile {
		p := ps.ps[0]
		perfRec = exec.Command("perf", "record", "-F", "499", "-g", "-o", filepath.Join(l.dir, "perf.data"), "-p", fmt.Sprint(p.pid()))
		perfRec.Stdout, perfRec.Stderr = p.log, p.log
		if err := perfRec.Start(); err != nil {
			res.Err = fmt.Sprintf("start perf: %v", err)
			return res
		}
	}

	timeout := b.o.runTimeout
	if c.wan {
		timeout = b.o.wanTimeout
	}
	deadline := res.Start.Add(timeout)
	var lastSample time.Time
	var quarterDone, heapDone bool
	var pr progress
	for {
		now := time.Now()
		if p := ps.exited(); p != nil {
			res.Err = fmt.Sprintf("process exited early (%v); log tail:\n%s", p.err, b.logTail(l.dir))
			return res
		}
		if now.After(deadline) {
			res.Err = fmt.Sprintf("timeout after %s with %d of %d records on the target", timeout, pr.copied, b.src.records)
			if c.wan {
				// The rate it reached counts (wanSection), the run does not.
				res.Wall, res.Records = now.Sub(res.Start), pr.copied
				res.Bytes = b.src.bytes * pr.copied / b.src.records
			}
			return res
		}
		if ctx.Err() != nil {
			res.Err = ctx.Err().Error()
			return res
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if c.eos {
			pr, err = b.committedProgress(lctx, l.remote)
		} else {
			pr, err = b.targetProgress(lctx, l.remote, b.src.ends, fencesAtStart(c))
		}
		cancel()
		at := time.Now()
		if err == nil && pr.copied > 0 && res.First == 0 {
			res.First = at.Sub(res.Start)
		}
		if profile && c.kind == kindMM2go && b.mm2goPprof != "" && !heapDone && pr.copied*2 >= b.src.records {
			heapDone = true
			b.heapProfile(ctx, c.name)
		}
		if err == nil && pr.complete {
			res.Wall = at.Sub(res.Start)
			s, err := ps.sample(b.ticks)
			if err != nil {
				res.Err = err.Error()
				return res
			}
			res.CPU, res.PeakRSS, res.RSSEnd = s.CPU, s.HWM, s.RSS
			fmt.Fprintf(samples, "%d,%d,%d,%d\n", res.Wall.Milliseconds(), pr.copied, s.RSS, s.CPU.Milliseconds())
			break
		}
		if at.Sub(lastSample) >= b.o.sampleEvery {
			lastSample = at
			if s, err := ps.sample(b.ticks); err == nil {
				fmt.Fprintf(samples, "%d,%d,%d,%d\n", at.Sub(res.Start).Milliseconds(), pr.copied, s.RSS, s.CPU.Milliseconds())
				if !quarterDone && pr.copied*4 >= b.src.records {
					quarterDone, res.RSSQuarter = true, s.RSS
				}
			}
		}
		wait := 50 * time.Millisecond
		if res.First == 0 {
			wait = 20 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	srcCPU1, dstCPU1 := b.brokerCPU()
	res.SrcBrokerCPU, res.DstBrokerCPU = srcCPU1-srcCPU0, dstCPU1-dstCPU0
	if perfRec != nil {
		_ = perfRec.Process.Signal(syscall.SIGINT)
		_ = perfRec.Wait()
		b.perfReport(ctx, l.dir, c.name)
	}
	stop()
	verify := b.verify
	if c.eos {
		verify = b.verifyCommitted
	}
	if err := verify(ctx, l.remote); err != nil {
		res.Err = err.Error()
		return res
	}
	res.Syncs = b.countSyncs(ctx, "mm2-offset-syncs."+l.dst+".internal")
	if c.kind == kindMM2go && phase == "backlog" {
		if res.Verify, err = b.mm2goVerify(ctx, l); err != nil {
			res.Err = err.Error()
			return res
		}
	}
	res.OK = true
	return res
}

// mm2goVerify runs `mm2go verify` on the flow of an mm2go run, checks that
// it matched every record of the backlog and nothing else, and returns how
// long it took.
func (b *bench) mm2goVerify(ctx context.Context, l launch) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, b.o.runTimeout)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, b.mm2go, "verify", "-c", filepath.Join(l.dir, "mm2.properties"), "--json", "--timeout", b.o.runTimeout.String())
	out, err := cmd.Output()
	took := time.Since(start)
	var cpu time.Duration
	var rssKiB int64
	if ps := cmd.ProcessState; ps != nil {
		cpu = ps.UserTime() + ps.SystemTime()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			rssKiB = ru.Maxrss
		}
	}
	var rep struct {
		OK     bool `json:"ok"`
		Totals struct {
			Matched int64 `json:"matched"`
		} `json:"totals"`
	}
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		return 0, fmt.Errorf("mm2go verify: %w", errors.Join(jerr, err))
	}
	if !rep.OK || rep.Totals.Matched != b.src.records {
		return 0, fmt.Errorf("mm2go verify: ok=%v, %d of %d records matched", rep.OK, rep.Totals.Matched, b.src.records)
	}
	b.logf("mm2go verify matched %d records in %.1fs, CPU %.1fs, peak RSS %d MiB", rep.Totals.Matched, took.Seconds(), cpu.Seconds(), rssKiB>>10)
	return took, nil
}

// countSyncs returns how many records the offset-syncs topic received: its
// end offset minus its start offset (the topic is compacted, but a run is
// far too short for the cleaner to touch its active segment), -1 if none.
func (b *bench) countSyncs(ctx context.Context, topic string) int64 {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ends, err := b.srcAdm.ListEndOffsets(ctx, topic)
	if err != nil {
		return -1
	}
	starts, err := b.srcAdm.ListStartOffsets(ctx, topic)
	if err != nil {
		return -1
	}
	var n int64 = -1
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil || o.Partition < 0 {
			return
		}
		start := int64(0)
		if s, ok := starts.Lookup(topic, o.Partition); ok && s.Err == nil {
			start = s.Offset
		}
		n = max(n, 0) + o.Offset - start
	})
	return n
}

// verify checks that remote on the target holds exactly the source topic:
// per partition the same log start (0) and end offset (less the abort
// marker that mm2go's fencing writes before the first copy), and the same
// last record (key, value, headers, timestamp). It runs after the contender
// stopped, so records written twice on the way out are caught too.
func (b *bench) verify(ctx context.Context, remote string) error {
	ends, err := b.dstAdm.ListEndOffsets(ctx, remote)
	if err != nil {
		return fmt.Errorf("verify: list end offsets of %s: %w", remote, err)
	}
	starts, err := b.dstAdm.ListStartOffsets(ctx, remote)
	if err != nil {
		return fmt.Errorf("verify: list start offsets of %s: %w", remote, err)
	}
	got := map[int32]int64{}
	for p, o := range ends[remote] {
		if o.Err != nil {
			return fmt.Errorf("verify: end offset of %s/%d: %w", remote, p, o.Err)
		}
		got[p] = o.Offset
	}
	if len(got) != len(b.src.ends) {
		return fmt.Errorf("verify: %s has %d partitions, the source %d", remote, len(got), len(b.src.ends))
	}
	lead, err := leadingMarkers(ctx, b.dstSeeds, remote, got)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	var bad []string
	for p, want := range b.src.ends {
		s, _ := starts.Lookup(remote, p)
		if got[p]-lead[p] != want || s.Offset != 0 {
			bad = append(bad, fmt.Sprintf("partition %d: offsets %d..%d after %d markers, want 0..%d", p, s.Offset, got[p], lead[p], want))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("verify: %s", strings.Join(bad, "; "))
	}
	last, err := lastRecords(ctx, b.dstSeeds, remote, got)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	for p, want := range b.src.last {
		r, ok := last[p]
		if !ok {
			return fmt.Errorf("verify: no last record in %s/%d", remote, p)
		}
		if d := policy.CopyDiff(want, r); d != 0 {
			return fmt.Errorf("verify: last record of %s/%d differs from the source's in its %s", remote, p, d)
		}
	}
	return nil
}

// cleanup deletes the topics of a run: on the target every topic that
// names one of its aliases, on the source its offset-syncs topic.
func (b *bench) cleanup(ctx context.Context, l launch) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, a := range []*kadm.Client{b.dstAdm, b.srcAdm} {
		td, err := a.ListTopics(ctx)
		if err != nil {
			b.logf("cleanup: list topics: %v", err)
			continue
		}
		var del []string
		for _, t := range td.Names() {
			for _, part := range strings.Split(t, ".") {
				if part == l.src || part == l.dst {
					del = append(del, t)
					break
				}
			}
		}
		if len(del) == 0 {
			continue
		}
		if _, err := a.DeleteTopics(ctx, del...); err != nil {
			b.logf("cleanup: delete %v: %v", del, err)
		}
	}
}

// logTail returns the end of a run's process log.
func (b *bench) logTail(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "process.log"))
	if err != nil {
		return err.Error()
	}
	return tailLines(string(data), 20)
}

// heapProfile saves the in-use and allocated space of the running mm2go
// with pprof (profile runs with -mm2go-pprof only), taken mid-copy.
func (b *bench) heapProfile(ctx context.Context, name string) {
	url := "http://" + b.o.pprofAddr + "/debug/pprof/heap"
	for _, idx := range []string{"inuse_space", "alloc_space"} {
		cmd := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount", "40", "-sample_index="+idx, url)
		cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+b.out) // pprof keeps a copy of what it fetched
		out, err := cmd.CombinedOutput()
		path := filepath.Join(b.out, fmt.Sprintf("heap-%s-%s.txt", name, idx))
		if err != nil {
			b.logf("heap profile of %s: %v\n%s", name, err, out)
			continue
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			b.logf("write %s: %v", path, err)
		}
	}
	b.logf("heap profiles of %s in %s", name, b.out)
}

// perfReport writes the flat profile of a perf recording next to it.
func (b *bench) perfReport(ctx context.Context, dir, name string) {
	out, err := exec.CommandContext(ctx, "perf", "report", "-i", filepath.Join(dir, "perf.data"), "--stdio",
		"--no-children", "--percent-limit", "0.5", "--sort", "dso,sym", "-g", "none").Output()
	if err != nil {
		b.logf("perf report for %s: %v", name, err)
		return
	}
	path := filepath.Join(b.out, "perf-"+name+".txt")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		b.logf("write %s: %v", path, err)
		return
	}
	b.logf("profile of %s in %s", name, path)
}

// fencesAtStart returns the control records contender c writes into each
// remote partition when it starts, before its first record: one abort
// marker for mm2go in the batches copy mode (its fencing, on by default),
// none for the others.
func fencesAtStart(c *contender) int64 {
	if c.kind == kindMM2go && !slices.Contains(c.props, recordsMode) {
		return 1
	}
	return 0
}

// leadingMarkers counts, per partition of topic, the control records before
// its first record: the abort marker that mm2go's fencing (the batches
// copy mode's default) writes into every remote partition when it starts.
func leadingMarkers(ctx context.Context, seeds []string, topic string, ends map[int32]int64) (map[int32]int64, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, itopic.ReaderOpts()...)...)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ranges := map[string]map[int32]itopic.Range{topic: {}}
	for p, e := range ends {
		ranges[topic][p] = itopic.Range{From: 0, To: min(e, 16)}
	}
	out := make(map[int32]int64)
	err = itopic.ReadRanges(ctx, cl, ranges, func(r *kgo.Record) bool {
		if !r.Attrs.IsControl() {
			return false
		}
		out[r.Partition]++
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("read the first offsets of %s: %w", topic, err)
	}
	return out, nil
}
