package main

import (
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name string
		line string
		want time.Duration
		err  bool
	}{
		{
			name: "plain command",
			line: "1234 (java) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 10 5 20 0 42 0 100 0 0",
			want: 3150 * time.Millisecond, // (250+50+10+5) ticks of 10ms
		},
		{
			name: "command with spaces and parentheses",
			line: "77 (a (b) c) R 1 77 77 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 0 0 0",
			want: 100 * time.Millisecond,
		},
		{name: "truncated", line: "77 (x) R 1 2 3", err: true},
		{name: "no command", line: "77 x R 1 2 3", err: true},
		{name: "not a number", line: "1 (x) S 1 1 1 0 -1 0 0 0 0 0 a 0 0 0 20", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatCPU([]byte(tc.line), 100)
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParseStatusMemory(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   string
		rss, hwm int64
		err      bool
	}{
		{
			name:   "process",
			status: "Name:\tmm2go\nVmPeak:\t 900 kB\nVmHWM:\t   2048 kB\nVmRSS:\t   1024 kB\nThreads:\t9\n",
			rss:    1 << 20, hwm: 2 << 20,
		},
		{name: "kernel thread", status: "Name:\tkworker\nThreads:\t1\n", err: true},
		{name: "bad unit", status: "VmHWM:\t 1 MB\nVmRSS:\t 1 kB\n", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rss, hwm, err := parseStatusMemory([]byte(tc.status))
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.rss, rss)
			require.Equal(t, tc.hwm, hwm)
		})
	}
}

func TestReadProcSelf(t *testing.T) {
	// Burn a little CPU so that the sample cannot be all zero.
	deadline := time.Now().Add(30 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	s, err := readProc(os.Getpid(), clockTicks())
	require.NoError(t, err)
	require.Positive(t, s.RSS)
	require.GreaterOrEqual(t, s.HWM, s.RSS)
	require.Positive(t, s.CPU)
}

func TestMedian(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name string
		in   []float64
		want float64
	}{
		{name: "odd", in: []float64{3, 1, 2}, want: 2},
		{name: "even", in: []float64{4, 1, 3, 2}, want: 2.5},
		{name: "NaNs ignored", in: []float64{nan, 5, nan}, want: 5},
		{name: "one", in: []float64{7}, want: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, median(tc.in), 1e-12)
		})
	}
	t.Run("empty", func(t *testing.T) {
		require.True(t, math.IsNaN(median(nil)))
		require.True(t, math.IsNaN(median([]float64{nan})))
	})
}

func TestPercentile(t *testing.T) {
	sorted := make([]time.Duration, 100)
	for i := range sorted {
		sorted[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{name: "p50 of 100", in: sorted, p: 50, want: 50 * time.Millisecond},
		{name: "p99 of 100", in: sorted, p: 99, want: 99 * time.Millisecond},
		{name: "p100 is the max", in: sorted, p: 100, want: 100 * time.Millisecond},
		{name: "tiny p is the min", in: sorted, p: 0.001, want: time.Millisecond},
		{name: "one value", in: sorted[:1], p: 99, want: time.Millisecond},
		{name: "empty", in: nil, p: 50, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, percentile(tc.in, tc.p))
		})
	}
}

// TestReceiverDuplicates: a send time that arrived twice or three times
// counts once; those outside the window do not count.
func TestReceiverDuplicates(t *testing.T) {
	r := &receiver{sent: []int64{1, 2, 2, 3, 3, 3, 4, 9, 9}}
	require.Equal(t, 2, r.duplicates(0, 5))
	require.Equal(t, 0, r.duplicates(4, 9))
	require.Equal(t, 1, r.duplicates(4, 10))
}

func TestSplitProps(t *testing.T) {
	require.Equal(t, []string{"a = 1", "{T}.b=2"}, splitProps(" a = 1 ;; {T}.b=2 ; "))
	require.Empty(t, splitProps(""))
}

func TestConfigLines(t *testing.T) {
	for _, tc := range []struct {
		name     string
		c        contender
		want     []string
		wantNone []string
	}{
		{
			name: "mm2go with aliases substituted",
			c:    contender{kind: kindMM2go, props: []string{"{T}.producer.linger.ms = 5", "{S}.consumer.fetch.max.bytes = 1"}},
			want: []string{
				"clusters = sA, tA", "sA.bootstrap.servers = h1:1", "tA.bootstrap.servers = h2:2",
				"sA->tA.enabled = true", "sA->tA.topics = backlog", "tA->sA.enabled = false",
				"tA->sA.emit.heartbeats.enabled = false",
				"tA.producer.linger.ms = 5", "sA.consumer.fetch.max.bytes = 1",
			},
			wantNone: []string{"plugin.discovery = service_load"},
		},
		{
			name: "MM2 gets its single-broker and start-up lines",
			c:    contender{kind: kindMM2},
			want: []string{"status.storage.replication.factor = 1", "config.storage.replication.factor = 1", "tA.plugin.discovery = service_load"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.c.configLines("sA", "tA", []string{"h1:1"}, []string{"h2:2"}, "backlog")
			for _, w := range tc.want {
				require.Contains(t, got, w)
			}
			for _, w := range tc.wantNone {
				require.NotContains(t, got, w)
			}
			for _, l := range got {
				require.NotContains(t, l, "{")
			}
		})
	}
}

func TestResultField(t *testing.T) {
	line := "RESULT consume records=200000 mib=97.6 fetch_records_per_sec=600600.6"
	for _, tc := range []struct {
		key  string
		want float64
		ok   bool
	}{
		{key: "records", want: 200000, ok: true},
		{key: "fetch_records_per_sec", want: 600600.6, ok: true},
		{key: "mib_per_sec", ok: false},
	} {
		t.Run(tc.key, func(t *testing.T) {
			got, ok := resultField(line, tc.key)
			require.Equal(t, tc.ok, ok)
			require.InDelta(t, tc.want, got, 1e-9)
		})
	}
}

func TestShapeRecord(t *testing.T) {
	s := newShape(1024, 1)
	r := s.record("t", 1234567, 8)
	require.Equal(t, "k00001234567", string(r.Key))
	require.Len(t, r.Key, keyLen)
	require.Len(t, r.Value, 1024)
	require.Equal(t, int32(1234567%8), r.Partition)
	require.Len(t, r.Headers, 2)
	size := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		size += len(h.Key) + len(h.Value)
	}
	require.Equal(t, recordBytes(1024), int64(size))
	// Same seed, same data: a reused backlog matches a regenerated one.
	require.Equal(t, r.Value, newShape(1024, 1).record("t", 1234567, 8).Value)
}

func TestSummarizeAndTargets(t *testing.T) {
	run := func(name string, round int, wall, cpu time.Duration, rss int64) runResult {
		return runResult{Phase: "backlog", Contender: name, Round: round, OK: true, Records: 1000, Bytes: 100e6,
			Wall: wall, CPU: cpu, PeakRSS: rss, First: 500 * time.Millisecond}
	}
	kib, small := latLoad{10000, 1024}, latLoad{50000, 100}
	lat := func(name string, round int, load latLoad, p99 time.Duration) runResult {
		return runResult{Phase: "latency", Contender: name, Round: round, OK: true, Load: load, P50: p99 / 2, P99: p99, LatCPUPct: 30}
	}
	results := []runResult{
		run("mm2go", 1, 2*time.Second, time.Second, 20<<20),
		run("mm2", 1, 10*time.Second, 10*time.Second, 400<<20),
		run("copyloop", 1, 2*time.Second, time.Second, 20<<20),
		run("mm2go", 2, 4*time.Second, 2*time.Second, 30<<20),
		run("mm2", 2, 20*time.Second, 10*time.Second, 400<<20),
		run("copyloop", 2, 2*time.Second, time.Second, 20<<20),
		{Phase: "backlog", Contender: "mm2", Round: 3, Err: "verify: differs"},
		lat("mm2go", 1, kib, 20*time.Millisecond),
		lat("mm2", 1, kib, 40*time.Millisecond),
		lat("mm2go", 1, small, 60*time.Millisecond),
		lat("mm2", 1, small, 80*time.Millisecond),
	}
	rows := summarize(results, kib)
	require.Len(t, rows, 3)
	require.Equal(t, "mm2go", rows[0].name)
	require.Equal(t, 2, rows[0].ok)
	require.InDelta(t, 3.0, rows[0].wall, 1e-9)  // median of 2s and 4s
	require.InDelta(t, 37.5, rows[0].mbps, 1e-9) // median of 50 and 25 MB/s
	require.InDelta(t, 20.0, rows[0].p99, 1e-9)
	require.Equal(t, 2, rows[1].ok)
	require.Equal(t, 3, rows[1].total) // the failed run counts as run, not in the medians

	require.InDelta(t, 20.0, rows[0].p99, 1e-9, "the main table's latency is the first load's")

	b := &bench{o: &options{latLoads: []latLoad{kib, small}, phases: []string{"backlog", "latency"}}, results: results}
	md := b.targets(rows)
	// Round 1: 100/10 = 10x, round 2: 50/10 = 5x; median 7.5x.
	require.Contains(t, md, "| MB per CPU-s ≥ 15 × mm2 (MM2's best) | 7.50× | no |")
	// Round 1: 100 %, round 2: 50 %; median 75 %.
	require.Contains(t, md, "| catch-up ≥ 90 % of copyloop | 75 % | no |")
	require.Contains(t, md, "| peak RSS ≤ 1/10 of mm2 (defaults) | 0.062× | yes |")
	require.Contains(t, md, "| p99 at 10000 records/s × 1024 B ≤ 50 ms | 20.0 ms | yes |")
	require.Contains(t, md, "| p99 at 10000 records/s × 1024 B ≤ 0.5 × mm2 (MM2's best) | 0.50× | yes |")
	require.Contains(t, md, "| p99 at 50000 records/s × 100 B ≤ 50 ms | 60.0 ms | no |")
	require.Contains(t, md, "| p99 at 50000 records/s × 100 B ≤ 0.5 × mm2 (MM2's best) | 0.75× | no |")
	loads := b.loadsSection()
	require.Contains(t, loads, "| contender | 10000 records/s × 1024 B | 50000 records/s × 100 B |")
	require.Contains(t, loads, "| mm2go | 10.0 / 20.0 / 30 | 30.0 / 60.0 / 30 |")
	require.Contains(t, loads, "| mm2 | 20.0 / 40.0 / 30 | 40.0 / 80.0 / 30 |")
	require.Contains(t, md, "| start to first record < 1 s | 0.50 s | yes |")
}

// TestWANSection: the WAN table's rates and ratios (a run cut by the
// timeout counts with the rate it reached, marked), the first record and
// the rate after it (none for a run cut by the timeout), and issue 15's
// targets at the largest RTT.
func TestWANSection(t *testing.T) {
	b := &bench{o: &options{latLoads: []latLoad{{10000, 1024}}, wanRTTs: []time.Duration{0, 80 * time.Millisecond}, wanTimeout: time.Minute}}
	for _, c := range []struct {
		base string
		kind kind
		rtt  time.Duration
	}{{"mm2go", kindMM2go, 0}, {"mm2", kindMM2, 0}, {"mm2go", kindMM2go, 80 * time.Millisecond}, {"mm2", kindMM2, 80 * time.Millisecond}} {
		b.reps = append(b.reps, &contender{name: fmt.Sprintf("%s@%dms", c.base, c.rtt.Milliseconds()), kind: c.kind, wan: true, rtt: c.rtt, base: c.base})
	}
	wan := func(name string, ok bool, wall, first time.Duration, bytes int64) runResult {
		return runResult{Phase: "wan", Contender: name, Round: 1, OK: ok, Wall: wall, First: first, Bytes: bytes, Records: bytes / 1000}
	}
	b.results = []runResult{
		wan("mm2go@0ms", true, 10*time.Second, time.Second, 2000e6),            // 200 MB/s, 222.2 after the first record
		wan("mm2@0ms", true, 40*time.Second, 4*time.Second, 2000e6),            // 50 MB/s, 55.6 after
		wan("mm2go@80ms", true, 11*time.Second, 3500*time.Millisecond, 2000e6), // 181.8 MB/s, 266.7 after
		wan("mm2@80ms", false, 60*time.Second, 9*time.Second, 60e6),            // 1 MB/s, cut by the timeout: none after
		{Phase: "latency", Contender: "mm2go@80ms", Round: 1, OK: true, P50: 110 * time.Millisecond, P99: 170 * time.Millisecond},
	}
	md := b.wanSection()
	require.Contains(t, md, "| mm2go | 80 | 181.8 | 0.91 | 181.82 | 3.50 | 266.7 | 1.20 | 110.0 | 170.0 | 90.0 |")
	require.Contains(t, md, "| mm2 | 80 | 1.0* | 0.02 | 1.00 | – | – | – | – | – | – |")
	require.Contains(t, md, "| mm2go | 0 | 200.0 | 1.00 | 4.00 | 1.00 | 222.2 | 1.00 | – | – | – |")
	require.Contains(t, md, "| catch-up ≥ 90 % of its own at 0 ms | 91 % | yes |")
	require.Contains(t, md, "| catch-up ≥ 3 × the best MM2's | 181.82× | yes |")
	require.Contains(t, md, "| p99 at the steady rate ≤ RTT + 50 ms | 170.0 ms | no |")
}

func TestDirSize(t *testing.T) {
	dir := t.TempDir()
	write := func(path string, n int) {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, path)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, path), make([]byte, n), 0o644))
	}
	write("backlog-0/00000000000000000000.log", 100)
	write("backlog-0/00000000000000000000.index", 1000) // preallocated index: not counted
	write("backlog-1/00000000000000000000.log", 10)
	write("backlog-2.abc123-delete/00000000000000000000.log", 5000) // deleted topic
	write("backlog-x-0/00000000000000000000.log", 7000)             // another topic
	require.Equal(t, int64(110), dirSize(dir, "backlog-"))
}

// TestScaleSection: the scale table has one line per instance count, the
// rate relative to one instance, the cores used and allowed, and the
// brokers' cores.
func TestScaleSection(t *testing.T) {
	rows := []*summaryRow{
		{name: "mm2go", wall: 10, mbps: 100},
		{name: scaleName(1), wall: 20, mbps: 50, cpu: 5, brokers: 10},
		{name: scaleName(2), wall: 10, mbps: 100, cpu: 5, brokers: 10},
		{name: scaleName(3), wall: 8, mbps: 125, cpu: 6, brokers: 12},
	}
	got := scaleSection(rows, 3, 6, 0.25)
	require.Contains(t, got, "`tasks.max = 6`, each in a cgroup of 0.25 CPU")
	require.Contains(t, got, "| 1 | 20.0 | 50.0 | 1.00 | 0.25 | 0.25 | 0.50 |")
	require.Contains(t, got, "| 2 | 10.0 | 100.0 | 2.00 | 0.50 | 0.50 | 1.00 |")
	require.Contains(t, got, "| 3 | 8.0 | 125.0 | 2.50 | 0.75 | 0.75 | 1.50 |")
	require.Empty(t, scaleSection(rows[:1], 3, 6, 0.25), "no scale runs, no table")
}

func TestThrottleRate(t *testing.T) {
	c := throttleContenders(1_000_000, 2_000_000, 50)
	require.Equal(t, int64(20_000), c[0].throttle, "the stored batches over 50 s")
	require.Equal(t, int64(40_000), c[1].throttle, "the payload over 50 s")
	require.Contains(t, c[1].props, recordsMode)
	rate, ratio := throttleRate(c[0], runResult{Wall: 51 * time.Second, First: time.Second})
	require.InDelta(t, 20_000, rate, 1e-9)
	require.InDelta(t, 1, ratio, 1e-9)
	_, ratio = throttleRate(c[1], runResult{Wall: 46 * time.Second, First: 6 * time.Second})
	require.InDelta(t, 1.25, ratio, 1e-9, "2 MB in 40 s against 40 kB/s")
	rate, _ = throttleRate(c[0], runResult{Wall: time.Second, First: time.Second})
	require.Zero(t, rate, "no copy time: no rate")
}

func TestParseLoads(t *testing.T) {
	got, err := parseLoads("10000x1024, 50000x100")
	require.NoError(t, err)
	require.Equal(t, []latLoad{{10000, 1024}, {50000, 100}}, got)
	require.Equal(t, "50000x100", runLoad(runResult{Phase: "latency", Load: got[1]}), "runs.csv names the load")
	require.Empty(t, runLoad(runResult{Phase: "backlog"}))
	for _, bad := range []string{"", "10000", "10000x8", "0x1024", "x1024", "10kx1024"} {
		_, err := parseLoads(bad)
		require.Error(t, err, bad)
	}
}

func TestEOSSection(t *testing.T) {
	run := func(name string, wall, cpu time.Duration) runResult {
		return runResult{Phase: "eos", Contender: name, Round: 1, OK: true, Wall: wall, CPU: cpu, Records: 1000, Bytes: 2000e6,
			LoadBefore: [3]float64{1, 1, 1}, LoadAfter: [3]float64{1, 1, 1}}
	}
	rows := summarize([]runResult{
		run(nameMM2goEOS, 10*time.Second, 5*time.Second),     // 200 MB/s, 400 MB per CPU-s
		run(nameMM2EOS, 80*time.Second, 40*time.Second),      // 25 MB/s, 50
		run(nameMM2TunedEOS, 40*time.Second, 50*time.Second), // 50 MB/s, 40
		{Phase: "backlog", Contender: nameMM2goRecords, Round: 1, OK: true, Wall: 8 * time.Second, CPU: 4 * time.Second, Records: 1000, Bytes: 2000e6},
	}, latLoad{})
	md := eosSection(rows)
	require.Contains(t, md, "| mm2go-eos | 10.0 | 200.0 | 5.0 | 400.0 |")
	require.Contains(t, md, "4.00× the MB/s (mm2-tuned-eos), 8.0× the MB per CPU-s (mm2-eos)")
	require.Contains(t, md, "0.80× the MB/s, 0.80× the MB per CPU-s")
	require.Empty(t, eosSection(rows[1:]), "no section without mm2go-eos")
}

// TestFencesAtStart: the batches-mode mm2go profiles write one abort marker
// into each remote partition before their first record, which the first
// record's time and the copied count leave out; the record mode, MM2 and
// the copy loop write none.
func TestFencesAtStart(t *testing.T) {
	want := map[string]int64{nameMM2go: 1, nameMM2goLean: 1, nameMM2goBudget: 1, nameMM2goOverlap: 1,
		nameMM2goRecords: 0, nameMM2goRecordsLean: 0, nameMM2: 0, nameMM2Tuned: 0, nameMM2TunedWAN: 0, nameCopyLoop: 0}
	got := map[string]int64{}
	for _, c := range contenders(&options{}) {
		if _, ok := want[c.name]; ok {
			got[c.name] = fencesAtStart(c)
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("fencesAtStart: got %v, want %v", got, want)
	}
}
