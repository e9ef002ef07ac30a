package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
)

// machineInfo describes where the benchmark ran.
type machineInfo struct {
	cpus       int
	cpuModel   string
	memTotal   string
	kernel     string
	goVersion  string
	java       string
	kafka      string
	mm2go      string
	franzGo    string
	jvmProfile string
	// writebackHeld: the kernel's page-cache writeback was held for the
	// run (-hold-writeback).
	writebackHeld bool
	started       time.Time
	loadBefore    [3]float64
	loadAfter     [3]float64
}

func describeMachine(ctx context.Context, b *bench) machineInfo {
	m := machineInfo{cpus: runtime.NumCPU(), goVersion: runtime.Version(), started: time.Now(), loadBefore: loadAvg()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpuModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				f := strings.Fields(v)
				if kb, err := strconv.ParseFloat(f[0], 64); err == nil {
					m.memTotal = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(data))
	}
	if out, err := exec.CommandContext(ctx, "java", "-version").CombinedOutput(); err == nil {
		m.java = strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
	}
	if jars, _ := filepath.Glob(filepath.Join(b.tb.dir, "lib", "kafka-clients-*.jar")); len(jars) > 0 {
		m.kafka = strings.TrimSuffix(strings.TrimPrefix(filepath.Base(jars[0]), "kafka-clients-"), ".jar")
	}
	describe := []string{"describe", "--always", "--dirty"}
	if b.o.mm2goRev != "" {
		describe = []string{"describe", "--always", b.o.mm2goRev}
	}
	if out, err := exec.CommandContext(ctx, "git", describe...).Output(); err == nil {
		m.mm2go = strings.TrimSpace(string(out))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/twmb/franz-go" {
				m.franzGo = d.Version
			}
		}
	}
	m.jvmProfile = b.o.jvmProfile
	return m
}

func (m machineInfo) summary() string {
	return fmt.Sprintf("%d CPUs (%s), %s RAM, load %.2f %.2f %.2f", m.cpus, m.cpuModel, m.memTotal,
		m.loadBefore[0], m.loadBefore[1], m.loadBefore[2])
}

// runColumns are the columns of runs.csv, one row per run.
func runColumns() []string {
	return []string{
		"phase", "contender", "round", "load", "ok", "start", "records", "mb", "wall_s", "mb_per_s", "records_per_s",
		"cpu_s", "mb_per_cpu_s", "peak_rss_mib", "rss_at_25pct_mib", "rss_at_end_mib", "first_record_s",
		"src_broker_cpu_s", "dst_broker_cpu_s", "p50_ms", "p99_ms", "max_ms", "cpu_pct_at_rate",
		"offset_syncs", "verify_s", "load1_before", "load1_after", "note", "error",
	}
}

// writeRuns writes every run so far to runs.csv.
func (b *bench) writeRuns() error {
	f, err := os.Create(filepath.Join(b.out, "runs.csv"))
	if err != nil {
		return fmt.Errorf("create runs.csv: %w", err)
	}
	defer f.Close()
	w := csv.NewWriter(f)
	_ = w.Write(runColumns())
	for _, r := range b.results {
		_ = w.Write([]string{
			r.Phase, r.Contender, strconv.Itoa(r.Round), runLoad(r), strconv.FormatBool(r.OK), r.Start.Format(time.RFC3339),
			strconv.FormatInt(r.Records, 10), num(float64(r.Bytes) / 1e6), num(r.Wall.Seconds()), num(r.mbps()), num(r.rps()),
			num(r.CPU.Seconds()), num(r.mbPerCPU()), mib(r.PeakRSS), mib(r.RSSQuarter), mib(r.RSSEnd), num(r.First.Seconds()),
			num(r.SrcBrokerCPU.Seconds()), num(r.DstBrokerCPU.Seconds()), num(ms(r.P50)), num(ms(r.P99)), num(ms(r.PMax)),
			num(r.LatCPUPct), strconv.FormatInt(r.Syncs, 10), num(nan(r.Verify)), num(r.LoadBefore[0]), num(r.LoadAfter[0]), strings.TrimSpace(r.Note), r.Err,
		})
	}
	w.Flush()
	return w.Error()
}

// runLoad is a latency run's load as the flag writes it ("10000x1024"),
// empty for the other phases.
func runLoad(r runResult) string {
	if r.Load == (latLoad{}) {
		return ""
	}
	return r.Load.String()
}

// nan is d in seconds, NaN (not measured) when d is not positive.
func nan(d time.Duration) float64 {
	if d <= 0 {
		return math.NaN()
	}
	return d.Seconds()
}

func num(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return ""
	}
	return strconv.FormatFloat(x, 'f', 3, 64)
}

func mib(n int64) string {
	if n <= 0 {
		return ""
	}
	return num(float64(n) / (1 << 20))
}

// summaryRow is the median over the successful runs of one contender.
type summaryRow struct {
	name                                string
	ok, total, latOK, latTotal          int
	wall, mbps, rps, cpu, mbPerCPU, rss float64
	first, brokers                      float64
	syncsPerM                           float64 // offset-sync records per million records copied
	p50, p99, pmax, latCPU, latRSS      float64
	loadMin, loadMax                    float64
	rounds                              map[int]runResult // backlog runs by round
	latRounds                           map[int]runResult // latency runs by round
}

// summarize computes the median row of every contender in run order, with
// the latency runs at load (the others are left out).
func summarize(results []runResult, load latLoad) []*summaryRow {
	var rows []*summaryRow
	byName := map[string]*summaryRow{}
	vals := map[string]map[string][]float64{}
	for _, r := range results {
		if strings.HasPrefix(r.Phase, "profile") || (r.Phase == "latency" && r.Load != load) {
			continue
		}
		row := byName[r.Contender]
		if row == nil {
			row = &summaryRow{name: r.Contender, loadMin: math.Inf(1), loadMax: math.Inf(-1),
				rounds: map[int]runResult{}, latRounds: map[int]runResult{}}
			byName[r.Contender] = row
			rows = append(rows, row)
			vals[r.Contender] = map[string][]float64{}
		}
		v := vals[r.Contender]
		add := func(k string, x float64) { v[k] = append(v[k], x) }
		if r.Phase == "latency" {
			row.latTotal++
		} else {
			row.total++
		}
		row.loadMin = min(row.loadMin, r.LoadBefore[0], r.LoadAfter[0])
		row.loadMax = max(row.loadMax, r.LoadBefore[0], r.LoadAfter[0])
		if !r.OK {
			continue
		}
		if r.Phase == "latency" {
			row.latOK++
			row.latRounds[r.Round] = r
			add("p50", ms(r.P50))
			add("p99", ms(r.P99))
			add("pmax", ms(r.PMax))
			if r.LatCPUPct > 0 {
				add("latcpu", r.LatCPUPct)
			}
			if r.PeakRSS > 0 {
				add("latrss", float64(r.PeakRSS)/(1<<20))
			}
			continue
		}
		row.ok++
		row.rounds[r.Round] = r
		add("wall", r.Wall.Seconds())
		add("mbps", r.mbps())
		add("rps", r.rps())
		add("cpu", nan(r.CPU))
		add("mbcpu", r.mbPerCPU())
		if r.PeakRSS > 0 {
			add("rss", float64(r.PeakRSS)/(1<<20))
		}
		add("first", nan(r.First))
		add("brokers", (r.SrcBrokerCPU + r.DstBrokerCPU).Seconds())
		if r.Syncs >= 0 && r.Records > 0 {
			add("syncs", float64(r.Syncs)*1e6/float64(r.Records))
		}
	}
	for _, row := range rows {
		v := vals[row.name]
		row.wall, row.mbps, row.rps = median(v["wall"]), median(v["mbps"]), median(v["rps"])
		row.cpu, row.mbPerCPU, row.rss = median(v["cpu"]), median(v["mbcpu"]), median(v["rss"])
		row.first, row.brokers = median(v["first"]), median(v["brokers"])
		row.syncsPerM = median(v["syncs"])
		row.p50, row.p99, row.pmax = median(v["p50"]), median(v["p99"]), median(v["pmax"])
		row.latCPU, row.latRSS = median(v["latcpu"]), median(v["latrss"])
	}
	return rows
}

// cell formats a table cell with prec decimals; "–" for a missing value.
func cell(x float64, prec int) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

// report writes results.csv (medians) and results.md.
func (b *bench) report() error {
	rows := summarize(b.results, b.o.latLoads[0])
	f, err := os.Create(filepath.Join(b.out, "results.csv"))
	if err != nil {
		return fmt.Errorf("create results.csv: %w", err)
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"contender", "backlog_runs_ok", "backlog_runs", "wall_s", "mb_per_s", "records_per_s", "cpu_s",
		"mb_per_cpu_s", "peak_rss_mib", "first_record_s", "brokers_cpu_s", "latency_runs_ok", "latency_runs",
		"p50_ms", "p99_ms", "max_ms", "cpu_pct_at_rate", "rss_mib_at_rate", "load1_min", "load1_max"})
	for _, r := range rows {
		_ = w.Write([]string{r.name, strconv.Itoa(r.ok), strconv.Itoa(r.total), num(r.wall), num(r.mbps), num(r.rps),
			num(r.cpu), num(r.mbPerCPU), num(r.rss), num(r.first), num(r.brokers), strconv.Itoa(r.latOK),
			strconv.Itoa(r.latTotal), num(r.p50), num(r.p99), num(r.pmax), num(r.latCPU), num(r.latRSS),
			num(r.loadMin), num(r.loadMax)})
	}
	w.Flush()
	if err := errors.Join(w.Error(), f.Close()); err != nil {
		return fmt.Errorf("write results.csv: %w", err)
	}
	md := b.markdown(rows)
	if err := os.WriteFile(filepath.Join(b.out, "results.md"), []byte(md), 0o644); err != nil {
		return fmt.Errorf("write results.md: %w", err)
	}
	fmt.Print(md)
	b.logf("results in %s", b.out)
	return nil
}

// markdown renders the report: the machine, the table of medians and the
// issue's target ratios.
func (b *bench) markdown(rows []*summaryRow) string {
	o, m := b.o, b.machine
	var s strings.Builder
	fmt.Fprintf(&s, "### Results (%s)\n\n", m.started.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&s, "Backlog: %d records × %d B values (keys, 2 headers; %.1f MB payload, %.1f MB lz4 on disk) in %d partitions. "+
		"Medians of %d backlog rounds and %d latency rounds (%s measured after %s warm-up; p50, p99 and CPU at %s).\n\n",
		b.src.records, o.valueSize, float64(b.src.bytes)/1e6, float64(b.src.diskBytes)/1e6, b.src.partitions,
		o.rounds, o.latRounds, o.latDuration, o.latWarmup, loadName(o.latLoads[0]))
	s.WriteString("| contender | wall s | MB/s | records/s | CPU s | MB per CPU-s | peak RSS MiB | first record s | brokers CPU s | p50 ms | p99 ms | CPU % at rate | offset syncs per 1M records | runs ok | load (1 min) |\n")
	s.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		runs := fmt.Sprintf("%d/%d", r.ok, r.total)
		if r.latTotal > 0 {
			runs += fmt.Sprintf(" + %d/%d", r.latOK, r.latTotal)
		}
		fmt.Fprintf(&s, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s–%s |\n",
			r.name, cell(r.wall, 1), cell(r.mbps, 1), cell(r.rps, 0), cell(r.cpu, 1), cell(r.mbPerCPU, 1),
			cell(r.rss, 0), cell(r.first, 2), cell(r.brokers, 1), cell(r.p50, 1), cell(r.p99, 1),
			cell(r.latCPU, 0), cell(r.syncsPerM, 0), runs, cell(r.loadMin, 1), cell(r.loadMax, 1))
	}
	s.WriteString("\n")
	if b.phase("latency") && len(o.latLoads) > 1 {
		s.WriteString(b.loadsSection())
	}
	s.WriteString(b.targets(rows))
	if b.phase("scale") {
		s.WriteString(scaleSection(rows, o.scaleInstances, o.scaleTasks, o.scaleCPU))
	}
	if b.phase("throttle") {
		s.WriteString(b.throttleSection())
	}
	if b.phase("eos") {
		s.WriteString(eosSection(rows))
	}
	if b.phase("wan") {
		s.WriteString(b.wanSection())
	}
	s.WriteString("\nContenders:\n\n")
	listed := map[string]bool{}
	for _, c := range b.reps {
		if b.wants(c.name) || c.eos {
			fmt.Fprintf(&s, "* `%s`: %s\n", c.name, c.about)
			listed[c.name] = true
		}
	}
	for _, c := range b.reps {
		// The WAN phase's NAME@RTT runs are described by their base.
		if base := b.contender(c.base); c.wan && base != nil && !listed[c.base] {
			fmt.Fprintf(&s, "* `%s` (WAN phase): %s\n", c.base, base.about)
			listed[c.base] = true
		}
	}
	if b.wants(perfProduce) || b.wants(perfCopy) {
		fmt.Fprintf(&s, "* `perf-produce`: ProducerPerformance, %d × %d B to a fresh %d-partition topic on the target, `%s`\n",
			b.src.records, o.valueSize, o.partitions, o.perfProducer)
	}
	if b.wants(perfConsume) || b.wants(perfCopy) {
		s.WriteString("* `perf-consume`: ConsumerPerformance reading the backlog from the source\n")
		s.WriteString("* `perf-copy`: both at once; CPU and RSS are the sums of the two JVMs\n")
	}
	if b.wants(direct) {
		s.WriteString("* `direct`: latency floor, no replicator: the latency consumer reads the source topic\n")
	}
	fmt.Fprintf(&s, "\nMachine: %d CPUs (%s), %s RAM, Linux %s; load average before %.2f %.2f %.2f, after %.2f %.2f %.2f. "+
		"%s, Kafka %s (testbed JVM profile `%s`), %s, franz-go %s, mm2go %s.\n",
		m.cpus, m.cpuModel, m.memTotal, m.kernel, m.loadBefore[0], m.loadBefore[1], m.loadBefore[2],
		m.loadAfter[0], m.loadAfter[1], m.loadAfter[2], m.java, m.kafka, m.jvmProfile, m.goVersion, m.franzGo, m.mm2go)
	if m.writebackHeld {
		s.WriteString("The brokers' data stayed in the page cache for the run (`-hold-writeback`: no flush to disk 30 s after a write).\n")
	} else {
		s.WriteString("Page-cache writeback as the kernel has it (`-hold-writeback` off or not possible): a flush to disk 30 s after a write may stall whichever run it falls in.\n")
	}
	return s.String()
}

// targetLine writes one row of a targets table: what, the figure (format
// applied) and whether it meets the target; "not measured" for NaN.
func targetLine(s *strings.Builder, what string, got float64, format string, ok bool) {
	met := "no"
	if ok {
		met = "yes"
	}
	if math.IsNaN(got) {
		fmt.Fprintf(s, "| %s | not measured | – |\n", what)
		return
	}
	fmt.Fprintf(s, "| %s | "+format+" | %s |\n", what, got, met)
}

// loadName is a latency load as the report writes it.
func loadName(l latLoad) string { return fmt.Sprintf("%d records/s × %d B", l.rate, l.valueSize) }

// loadsSection is the latency phase at every load: per contender the
// median p50, p99 and CPU at each.
func (b *bench) loadsSection() string {
	var names []string
	for _, r := range b.results {
		if r.Phase == "latency" && !slices.Contains(names, r.Contender) {
			names = append(names, r.Contender)
		}
	}
	var s strings.Builder
	s.WriteString("Latency at each load (medians; p50 ms / p99 ms / CPU % of one core at the rate):\n\n| contender |")
	perLoad := make([][]*summaryRow, len(b.o.latLoads))
	for i, l := range b.o.latLoads {
		perLoad[i] = summarize(b.results, l)
		fmt.Fprintf(&s, " %s |", loadName(l))
	}
	s.WriteString("\n|---|" + strings.Repeat("--:|", len(b.o.latLoads)) + "\n")
	for _, n := range names {
		fmt.Fprintf(&s, "| %s |", n)
		for i := range b.o.latLoads {
			r := findRow(perLoad[i], n)
			if r == nil || r.latOK == 0 {
				s.WriteString(" – |")
				continue
			}
			fmt.Fprintf(&s, " %s / %s / %s |", cell(r.p50, 1), cell(r.p99, 1), cell(r.latCPU, 0))
		}
		s.WriteString("\n")
	}
	s.WriteString("\n")
	return s.String()
}

// findRow returns the row of contender name, nil without one.
func findRow(rows []*summaryRow, name string) *summaryRow {
	i := slices.IndexFunc(rows, func(r *summaryRow) bool { return r.name == name })
	if i < 0 {
		return nil
	}
	return rows[i]
}

// bestRow returns the row of names with the highest (hi) or lowest metric,
// nil when none has it.
func bestRow(rows []*summaryRow, metric func(*summaryRow) float64, hi bool, names ...string) *summaryRow {
	var b *summaryRow
	for _, n := range names {
		r := findRow(rows, n)
		if r == nil || math.IsNaN(metric(r)) {
			continue
		}
		if b == nil || (metric(r) > metric(b)) == hi {
			b = r
		}
	}
	return b
}

// perRound is the median over rounds of f of x's and y's runs in the same
// round (their latency runs when lat). Both ran back to back, so machine
// noise mostly cancels in a ratio.
func perRound(x, y *summaryRow, lat bool, f func(a, c runResult) float64) float64 {
	if x == nil || y == nil {
		return math.NaN()
	}
	xr, yr := x.rounds, y.rounds
	if lat {
		xr, yr = x.latRounds, y.latRounds
	}
	var v []float64
	for round, a := range xr {
		if c, ok := yr[round]; ok {
			v = append(v, f(a, c))
		}
	}
	return median(v)
}

// targets checks the ratios, each the median of per-round ratios
// (see perRound); the latency targets at every load.
func (b *bench) targets(rows []*summaryRow) string {
	mm2gos := []string{nameMM2go, nameMM2goLean, nameMM2goRecords, nameMM2goRecordsLean}
	mm2s := []string{nameMM2, nameMM2Tuned}
	var s strings.Builder
	s.WriteString("| target (issue 15: the default mode, `mm2go`) | measured (median of per-round ratios) | met |\n|---|---|---|\n")
	line := func(what string, got float64, format string, ok bool) { targetLine(&s, what, got, format, ok) }
	def := findRow(rows, nameMM2go)
	mbCPU := func(r *summaryRow) float64 { return r.mbPerCPU }
	if mm2E := bestRow(rows, mbCPU, true, mm2s...); def != nil && mm2E != nil {
		x := perRound(def, mm2E, false, func(a, c runResult) float64 { return a.mbPerCPU() / c.mbPerCPU() })
		line(fmt.Sprintf("MB per CPU-s ≥ 15 × %s (MM2's best)", mm2E.name), x, "%.2f×", x >= 15)
	}
	if mm2D := findRow(rows, nameMM2); def != nil && mm2D != nil {
		x := perRound(def, mm2D, false, func(a, c runResult) float64 { return float64(a.PeakRSS) / float64(c.PeakRSS) })
		line("peak RSS ≤ 1/10 of mm2 (defaults)", x, "%.3f×", x <= 0.1)
	}
	if c := findRow(rows, nameCopyLoop); def != nil && c != nil {
		x := perRound(def, c, false, func(a, c runResult) float64 { return a.mbps() / c.mbps() })
		line("catch-up ≥ 90 % of copyloop", 100*x, "%.0f %%", x >= 0.9)
	}
	if def != nil && b.phase("backlog") {
		line("start to first record < 1 s", def.first, "%.2f s", def.first < 1)
	}
	p99 := func(r *summaryRow) float64 { return r.p99 }
	for _, load := range b.o.latLoads {
		lrows := summarize(b.results, load)
		def := findRow(lrows, nameMM2go)
		if def == nil || def.latOK == 0 {
			continue
		}
		line(fmt.Sprintf("p99 at %s ≤ 50 ms", loadName(load)), def.p99, "%.1f ms", def.p99 <= 50)
		if mm2L := bestRow(lrows, p99, false, mm2s...); mm2L != nil && mm2L.latOK > 0 {
			x := perRound(def, mm2L, true, func(a, c runResult) float64 { return ms(a.P99) / ms(c.P99) })
			line(fmt.Sprintf("p99 at %s ≤ 0.5 × %s (MM2's best)", loadName(load), mm2L.name), x, "%.2f×", x <= 0.5)
		}
	}
	for _, n := range mm2gos {
		r := findRow(rows, n)
		if r == nil || !b.phase("backlog") {
			continue
		}
		var xs []float64
		for _, run := range r.rounds {
			if run.Verify > 0 {
				xs = append(xs, run.Verify.Seconds()/run.Wall.Seconds())
			}
		}
		if x := median(xs); !math.IsNaN(x) {
			line("`mm2go verify` of the backlog ≤ 2× the copy: "+n, x, "%.2f×", x <= 2)
		}
	}
	return s.String()
}
