// Command bench measures mm2go against Apache MirrorMaker 2 and against the
// raw limits of the brokers, on two real Apache Kafka clusters that it
// starts itself from the project's test bed (testbed/kafka-cluster.sh).
//
// It pre-loads a backlog on the source (by default 8 partitions, 2,000,000
// records of 1 KiB with keys and two headers, lz4-compressed by the
// producer), then copies it with each contender in turn, round after round,
// each run to a fresh target topic under fresh cluster aliases: mm2go
// (default and tuned), Apache MM2 in dedicated mode (default and tuned), a
// minimal franz-go copy loop (the ceiling), and Kafka's ProducerPerformance
// and ConsumerPerformance (the raw broker limits). A run counts only when
// the target holds exactly the backlog: the same end offset per partition
// and the same last record per partition. A second phase replicates a
// steady load (10,000 records/s of 1 KiB and 50,000 of 100 B by default)
// and measures the end-to-end latency from the send time on the source to
// the arrival at a consumer of the target. Results go to a directory as
// CSV (every run, and medians) and a markdown report that describes the
// machine.
//
// Run it from the repository root:
//
//	go run ./bench                          # full size, 2 rounds
//	go run ./bench -records 200000 -rounds 1 -latency-duration 10s
//
// It is not part of `go test ./...`. The package owns the benchmark only; it
// changes nothing in mm2go.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/fence"
	"github.com/mm2go/mm2go/internal/loop"
)

func main() { os.Exit(run(os.Args[1:])) }

// options are the command-line settings.
type options struct {
	records             int64
	partitions          int
	valueSize           int
	rounds              int
	latRounds           int
	latLoads            []latLoad // the first is the main table's and the WAN phase's
	latWarmup           time.Duration
	latDuration         time.Duration
	phases              []string
	only                []string
	srcPort             int
	dstPort             int
	kafkaRoot           string
	testbedDir          string
	out                 string
	keepClusters        bool
	runTimeout          time.Duration
	perfProfile         []string
	mm2goLean           string
	mm2goRecordsLean    string
	mm2goBudget         string
	mm2Tuned            string
	mm2TunedEnv         string
	mm2goRecordsLeanEnv string
	copyArgs            string
	perfProducer        string
	stopTimeout         time.Duration
	skipBuild           bool
	mm2goBinary         string
	mm2goRev            string
	pprofAddr           string
	backlogTopic        string
	sampleEvery         time.Duration
	reuseClusters       bool
	scaleInstances      int
	scaleTasks          int
	scaleCPU            float64
	throttleSeconds     float64
	wanRTTs             []time.Duration
	wanOnly             []string
	wanTimeout          time.Duration
	jvmProfile          string
	holdWriteback       bool
}

// Defaults of the tuned profiles; see bench/README.md for how they were
// chosen.
const (
	// defaultMM2goLean bounds what the batches mode holds: two fetches (one
	// being sent, one fetched ahead).
	defaultMM2goLean        = "{S}.consumer.fetch.max.bytes = 1048576; {S}.consumer.max.partition.fetch.bytes = 262144"
	defaultMM2goRecordsLean = "{T}.producer.linger.ms = 0; {T}.producer.buffer.memory = 8388608; " +
		"{S}.consumer.fetch.max.bytes = 4194304; {S}.consumer.max.partition.fetch.bytes = 524288"
	defaultMM2goRecordsLeanEnv = ""
	defaultMM2Tuned            = "tasks.max = 4; {T}.producer.linger.ms = 20; {T}.producer.batch.size = 524288; " +
		"{T}.producer.buffer.memory = 134217728; {S}.consumer.max.partition.fetch.bytes = 4194304; " +
		"{S}.consumer.fetch.max.bytes = 67108864; {S}.consumer.max.poll.records = 4000"
	// defaultMM2TunedEnv applies to the test JVM profile only (its MM2 heap
	// is 256 MiB); the stock profile's is Kafka's script's 2 GiB, and a
	// 1 GiB heap under G1 ran out of memory with the tuned buffers.
	defaultMM2TunedEnv = "MM2_HEAP=1g"
	defaultCopyArgs    = "-compression snappy"
	defaultPerfProps   = "acks=all linger.ms=20 batch.size=1048576"
)

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Int64Var(&o.records, "records", 2_000_000, "records in the backlog")
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of the backlog topic")
	fs.IntVar(&o.valueSize, "value-size", 1024, "value size of each record, bytes")
	fs.IntVar(&o.rounds, "rounds", 2, "rounds of the backlog phase (every contender once per round)")
	fs.IntVar(&o.latRounds, "latency-rounds", -1, "rounds of the latency phase (default: -rounds)")
	latLoads := fs.String("latency-loads", "10000x1024,50000x100", "latency phase: RATExBYTES loads, records per second and value size each (the first is the main table's and the WAN phase's)")
	fs.DurationVar(&o.latWarmup, "latency-warmup", 5*time.Second, "latency phase: time after the first record arrived before measuring")
	fs.DurationVar(&o.latDuration, "latency-duration", 30*time.Second, "latency phase: measured time")
	phases := fs.String("phases", "backlog,latency", "phases to run: backlog, latency, scale (mm2go with 1 to -scale-instances instances, each on a CPU budget), throttle (mm2go with a byte-rate limit, in both copy modes), eos (the backlog copied exactly once by mm2go, MM2 and the tuned MM2), wan (the source across a link with added round-trip time: backlog and latency; needs root)")
	only := fs.String("contenders", "mm2go,mm2go-lean,mm2go-records,mm2go-records-lean,mm2go-budget,mm2,mm2-tuned,copyloop,perf-produce,perf-consume,perf-copy,direct",
		"contenders to run (perf-* are the Kafka perf tools; direct is the latency floor without replicator)")
	fs.IntVar(&o.srcPort, "source-port", 19192, "broker port of the source cluster (controller: +1000)")
	fs.IntVar(&o.dstPort, "target-port", 29192, "broker port of the target cluster (controller: +1000)")
	fs.StringVar(&o.kafkaRoot, "kafka-root", "/tmp/mm2go-bench-kafka", "KAFKA_ROOT of the benchmark's clusters")
	fs.StringVar(&o.testbedDir, "testbed", "testbed", "the project's testbed directory")
	fs.StringVar(&o.out, "out", "", "output directory (default bench/out/<time>)")
	fs.BoolVar(&o.keepClusters, "keep-clusters", false, "leave the clusters running at the end")
	fs.BoolVar(&o.reuseClusters, "reuse-clusters", false, "reuse running benchmark clusters and their backlog when it matches")
	fs.DurationVar(&o.runTimeout, "run-timeout", 15*time.Minute, "give up on a run after this long")
	fs.DurationVar(&o.stopTimeout, "stop-timeout", 60*time.Second, "SIGTERM to SIGKILL when stopping a contender")
	perfProfile := fs.String("perf-record", "", "contenders to profile with `perf record` in one extra, uncounted run each: NAME (backlog) or NAME@latency (the measured window)")
	fs.StringVar(&o.mm2goLean, "mm2go-lean", defaultMM2goLean, "properties of mm2go-lean, ';'-separated; {S}/{T} are the aliases")
	fs.StringVar(&o.mm2goRecordsLean, "mm2go-records-lean", defaultMM2goRecordsLean, "properties of mm2go-records-lean (besides the copy mode), ';'-separated; {S}/{T} are the aliases")
	fs.StringVar(&o.mm2goBudget, "mm2go-budget", "33554432", "--buffer.max-bytes of mm2go-budget")
	fs.StringVar(&o.mm2goRecordsLeanEnv, "mm2go-records-lean-env", defaultMM2goRecordsLeanEnv, "environment of mm2go-records-lean (e.g. GOGC)")
	fs.StringVar(&o.mm2Tuned, "mm2-tuned", defaultMM2Tuned, "properties of mm2-tuned, ';'-separated; {S}/{T} are the aliases")
	fs.StringVar(&o.mm2TunedEnv, "mm2-tuned-env", "", "environment of mm2-tuned (testbed knobs such as MM2_HEAP); default: "+defaultMM2TunedEnv+" with -jvm-profile test, none with stock (2 GiB, as Kafka's script)")
	fs.StringVar(&o.copyArgs, "copyloop-args", defaultCopyArgs, "arguments of the copy loop")
	fs.StringVar(&o.perfProducer, "perf-producer-props", defaultPerfProps, "ProducerPerformance client properties")
	fs.BoolVar(&o.holdWriteback, "hold-writeback", true, "keep the brokers' data in the page cache during the run (vm.dirty_expire_centisecs 1 h, vm.dirty_background_ratio 40, vm.dirty_ratio 60; restored at the end; needs root): the kernel's flush 30 s after a write otherwise puts a stall into whichever run it falls in")
	fs.BoolVar(&o.skipBuild, "skip-build", false, "use -mm2go as is instead of building ./cmd/mm2go")
	fs.StringVar(&o.mm2goBinary, "mm2go", "", "mm2go binary (default: built into the output directory)")
	fs.StringVar(&o.mm2goRev, "mm2go-rev", "", "build mm2go from this git revision (git archive) instead of the working tree")
	fs.StringVar(&o.pprofAddr, "mm2go-pprof", "", "with -perf-record: also build an mm2go with net/http/pprof on this address for the profile runs, and save heap profiles")
	fs.StringVar(&o.backlogTopic, "backlog-topic", "backlog", "name of the backlog topic on the source")
	fs.DurationVar(&o.sampleEvery, "sample-every", 250*time.Millisecond, "RSS/CPU sampling interval of a contender")
	fs.IntVar(&o.scaleInstances, "scale-instances", 3, "scale phase: runs with 1 to this many mm2go instances on one file")
	fs.IntVar(&o.scaleTasks, "scale-tasks", 6, "scale phase: tasks.max of the flow")
	fs.Float64Var(&o.throttleSeconds, "throttle-seconds", 65, "throttle phase: the limit is set so that the copy of the backlog takes this long")
	wanRTTs := fs.String("wan-rtts", "0ms,20ms,80ms", "WAN phase: round-trip times the link to the source adds")
	wanOnly := fs.String("wan-contenders", nameMM2go+","+nameMM2goRecords+","+nameMM2+","+nameMM2TunedWAN,
		"WAN phase: contenders, each at every -wan-rtts")
	fs.DurationVar(&o.wanTimeout, "wan-timeout", 3*time.Minute, "WAN phase: a backlog copy still running after this long counts with the rate it reached")
	fs.StringVar(&o.jvmProfile, "jvm-profile", "stock", "KAFKA_JVM_PROFILE of the brokers and MM2 (stock: the flags of Kafka's own scripts; test: the test bed's)")
	fs.Float64Var(&o.scaleCPU, "scale-cpu", 0.25, "scale phase: CPUs each instance may use (a cgroup quota; needs root)")
	err := fs.Parse(args)
	if err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.phases = strings.Split(*phases, ",")
	o.only = strings.Split(*only, ",")
	if *perfProfile != "" {
		o.perfProfile = strings.Split(*perfProfile, ",")
	}
	if o.mm2TunedEnv == "" && o.jvmProfile == "test" {
		o.mm2TunedEnv = defaultMM2TunedEnv
	}
	o.wanOnly = strings.Split(*wanOnly, ",")
	if o.latLoads, err = parseLoads(*latLoads); err != nil {
		return nil, fmt.Errorf("-latency-loads: %w", err)
	}
	for f := range strings.SplitSeq(*wanRTTs, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("-wan-rtts: %q is not a duration of 0 or more", f)
		}
		o.wanRTTs = append(o.wanRTTs, d)
	}
	if o.latRounds < 0 {
		o.latRounds = o.rounds
	}
	switch {
	case o.records < int64(o.partitions) || o.partitions < 1:
		return nil, fmt.Errorf("-records (got %d) must be at least -partitions (got %d), which must be positive", o.records, o.partitions)
	case o.valueSize < 16:
		return nil, fmt.Errorf("-value-size must be at least 16 (got %d)", o.valueSize)
	case o.srcPort == o.dstPort:
		return nil, fmt.Errorf("-source-port and -target-port are both %d", o.srcPort)
	}
	return o, nil
}

// bench is the state of one benchmark invocation.
type bench struct {
	o     *options
	tb    testbed
	out   string
	self  string // this program, for the copy loop
	mm2go string // mm2go binary
	// mm2goPprof is mm2go with net/http/pprof (see buildMM2go), used only
	// for the uncounted profile runs.
	mm2goPprof string
	ticks      int64
	srcSeeds   []string
	dstSeeds   []string
	srcCl      *kgo.Client
	dstCl      *kgo.Client
	srcAdm     *kadm.Client
	dstAdm     *kadm.Client
	src        *sourceTopic
	shape      *shape         // the backlog's
	shapes     map[int]*shape // the latency phase's, by value size
	reps       []*contender
	wan        *wanLink // the WAN phase's link, nil without it
	results    []runResult
	machine    machineInfo
	log        *os.File
}

// logf prints a progress line to stderr and to the output directory's log.
func (b *bench) logf(format string, args ...any) {
	line := time.Now().Format("15:04:05 ") + fmt.Sprintf(format, args...) + "\n"
	fmt.Fprint(os.Stderr, line)
	if b.log != nil {
		fmt.Fprint(b.log, line)
	}
}

func (b *bench) wants(name string) bool { return slices.Contains(b.o.only, name) }

func (b *bench) phase(name string) bool { return slices.Contains(b.o.phases, name) }

func run(args []string) int {
	if len(args) > 0 && args[0] == "copyloop" {
		return runCopyLoop(args[1:])
	}
	o, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := benchmark(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

func benchmark(ctx context.Context, o *options) (err error) {
	b := &bench{o: o, ticks: clockTicks()}
	if b.out = o.out; b.out == "" {
		b.out = filepath.Join("bench", "out", time.Now().Format("20060102-150405"))
	}
	if b.out, err = filepath.Abs(b.out); err != nil {
		return fmt.Errorf("resolve output directory: %w", err)
	}
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return fmt.Errorf("create output directory: %w", err)
	}
	if b.log, err = os.Create(filepath.Join(b.out, "bench.log")); err != nil {
		return fmt.Errorf("create log: %w", err)
	}
	defer b.log.Close()
	tbDir, err := filepath.Abs(o.testbedDir)
	if err != nil {
		return fmt.Errorf("resolve testbed directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(tbDir, "kafka-cluster.sh")); err != nil {
		return fmt.Errorf("find the testbed (run from the repository root or set -testbed): %w", err)
	}
	b.tb = testbed{dir: tbDir, root: o.kafkaRoot, env: []string{"KAFKA_JVM_PROFILE=" + o.jvmProfile}}
	if b.self, err = os.Executable(); err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	b.reps = contenders(o)
	b.logf("output in %s", b.out)

	b.mm2go = o.mm2goBinary
	if !o.skipBuild {
		b.mm2go = filepath.Join(b.out, "mm2go")
		if err := buildMM2go(ctx, o.mm2goRev, b.mm2go, false); err != nil {
			return err
		}
		if o.pprofAddr != "" {
			b.mm2goPprof = b.mm2go + "-pprof"
			if err := buildMM2go(ctx, o.mm2goRev, b.mm2goPprof, true); err != nil {
				return err
			}
		}
	}
	if b.mm2go == "" {
		return errors.New("-skip-build needs -mm2go")
	}

	b.machine = describeMachine(ctx, b)
	b.logf("machine: %s", b.machine.summary())
	if o.holdWriteback {
		var held sysctls
		defer held.restore(b.logf)
		if err := held.holdWriteback(b.logf); err != nil {
			b.logf("page-cache writeback left as the kernel has it: %v", err)
		} else {
			b.machine.writebackHeld = true
		}
	}

	if _, err := b.tb.run(ctx, "setup.sh"); err != nil {
		return err
	}
	// Registered first: a cluster that started is stopped even when the
	// other one failed.
	defer func() {
		if o.keepClusters {
			b.logf("clusters left running under %s (stop: KAFKA_ROOT=%s testbed/env.sh down)", o.kafkaRoot, o.kafkaRoot)
			return
		}
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		for _, n := range []string{"bsrc", "bdst"} {
			if e := b.tb.stop(stopCtx, n); e != nil {
				err = errors.Join(err, e)
			}
		}
		_ = os.Remove(o.kafkaRoot) // only if empty
		b.logf("clusters stopped")
	}()
	if b.phase("wan") {
		if o.reuseClusters {
			return errors.New("-phases wan starts its own clusters (their WAN listeners): drop -reuse-clusters")
		}
		if b.wan, err = openWAN(ctx, b.logf); err != nil {
			return err
		}
		defer b.wan.close()
	}
	if err := b.startClusters(ctx); err != nil {
		return err
	}
	if err := b.connect(); err != nil {
		return err
	}
	defer b.srcCl.Close()
	defer b.dstCl.Close()
	if err := b.initKafkaInternals(ctx); err != nil {
		return err
	}

	if err := b.prepareBacklog(ctx); err != nil {
		return err
	}
	b.warmUp(ctx)

	if b.phase("backlog") {
		for round := 1; round <= o.rounds; round++ {
			for _, c := range b.reps {
				if !b.wants(c.name) {
					continue
				}
				b.record(b.replicate(ctx, c, round, false))
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
			for _, n := range []string{perfProduce, perfConsume, perfCopy} {
				if b.wants(n) {
					b.record(b.perfTool(ctx, n, round))
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	if b.phase("scale") {
		scale := scaleContenders(o.scaleInstances, o.scaleTasks, o.scaleCPU)
		b.reps = append(b.reps, scale...)
		for round := 1; round <= o.rounds; round++ {
			for _, c := range scale {
				b.record(b.replicate(ctx, c, round, false))
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	if b.phase("throttle") {
		throttled := throttleContenders(b.src.diskBytes, b.src.bytes, o.throttleSeconds)
		b.reps = append(b.reps, throttled...)
		for _, c := range throttled {
			b.record(b.replicate(ctx, c, 1, false))
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	if b.phase("eos") {
		eos := eosContenders(o)
		b.reps = append(b.reps, eos...)
		for round := 1; round <= o.rounds; round++ {
			for _, c := range eos {
				b.record(b.replicate(ctx, c, round, false))
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	if b.phase("wan") {
		if err := b.wanPhase(ctx); err != nil {
			return err
		}
	}
	if b.phase("latency") {
		for round := 1; round <= o.latRounds; round++ {
			for _, load := range o.latLoads {
				if b.wants(direct) {
					b.record(b.latency(ctx, nil, round, load, false))
				}
				for _, c := range b.reps {
					if !b.wants(c.name) {
						continue
					}
					b.record(b.latency(ctx, c, round, load, false))
					if ctx.Err() != nil {
						return ctx.Err()
					}
				}
			}
		}
	}
	for _, name := range o.perfProfile {
		name, lat := strings.CutSuffix(name, "@latency")
		i := slices.IndexFunc(b.reps, func(c *contender) bool { return c.name == name })
		if i < 0 {
			return fmt.Errorf("-perf-record: no contender %q", name)
		}
		var r runResult
		if lat {
			r = b.latency(ctx, b.reps[i], 0, o.latLoads[0], true)
		} else {
			r = b.replicate(ctx, b.reps[i], 0, true)
		}
		b.logf("profile run: %s", r.summary())
	}
	b.machine.loadAfter = loadAvg()
	return b.report()
}

// warmUp copies the backlog once with the copy loop, not recorded: the
// brokers' JVMs compile their hot paths during the first copies, and the
// contender measured first paid for it (in a WAN phase's first copy the
// target broker spent four times the CPU of the same copy a round later,
// 8.7 s against 2.2, and the copy took twice as long).
func (b *bench) warmUp(ctx context.Context) {
	c := b.contender(nameCopyLoop)
	if c == nil {
		return
	}
	b.logf("warm-up: one copy of the backlog by %s, not recorded", c.name)
	r := b.replicate(ctx, c, 0, false)
	b.logf("warm-up: %s", r.summary())
}

// record keeps a result and logs it.
func (b *bench) record(r runResult) {
	b.results = append(b.results, r)
	b.logf("RESULT %s", r.summary())
	if err := b.writeRuns(); err != nil {
		b.logf("write runs.csv: %v", err)
	}
}

// startClusters starts the source (bsrc) and target (bdst) clusters, or
// reuses them with -reuse-clusters.
func (b *bench) startClusters(ctx context.Context) error {
	type cl struct {
		name    string
		port    int
		dst     *[]string
		wanAddr string
	}
	var errs []error
	for _, c := range []cl{{"bsrc", b.o.srcPort, &b.srcSeeds, wanSourceAddr}, {"bdst", b.o.dstPort, &b.dstSeeds, wanTargetAddr}} {
		if b.o.reuseClusters && b.tb.healthy(ctx, c.name, c.port) {
			b.logf("reusing cluster %s on 127.0.0.1:%d", c.name, c.port)
			*c.dst = []string{fmt.Sprintf("127.0.0.1:%d", c.port)}
			continue
		}
		t0 := time.Now()
		var env []string
		if b.wan != nil {
			env = append(env, "KAFKA_EXTRA_PROPS="+wanListenerProps(c.port, c.wanAddr))
		}
		bs, err := b.tb.start(ctx, c.name, c.port, env)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b.logf("cluster %s up at %s in %.1fs", c.name, bs, time.Since(t0).Seconds())
		*c.dst = strings.Split(bs, ",")
	}
	return errors.Join(errs...)
}

func (b *bench) connect() error {
	var err error
	fresh := kgo.MetadataMinAge(100 * time.Millisecond)
	if b.srcCl, err = kgo.NewClient(kgo.SeedBrokers(b.srcSeeds...), fresh); err != nil {
		return fmt.Errorf("create source admin client: %w", err)
	}
	if b.dstCl, err = kgo.NewClient(kgo.SeedBrokers(b.dstSeeds...), fresh); err != nil {
		return fmt.Errorf("create target admin client: %w", err)
	}
	b.srcAdm, b.dstAdm = kadm.NewClient(b.srcCl), kadm.NewClient(b.dstCl)
	return nil
}

// initKafkaInternals has both clusters create the internal topics Kafka
// creates on first use, before any contender runs: __consumer_offsets (a
// group's first coordinator lookup) and __transaction_state (the first
// transactional producer's). Once in a cluster's life, that took about 2 s,
// which the first contender of a run on fresh clusters paid in its time to
// the first record and no later one did.
func (b *bench) initKafkaInternals(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	began := time.Now()
	for _, side := range []struct {
		name string
		cl   *kgo.Client
	}{{"source", b.srcCl}, {"target", b.dstCl}} {
		// The coordinator is not available until the topic is created:
		// asked again until it is.
		for {
			_, err := kadm.NewClient(side.cl).FetchOffsets(ctx, "mm2go-bench-init")
			if err == nil {
				break
			}
			if !kerr.IsRetriable(err) || !loop.Sleep(ctx, 50*time.Millisecond) {
				return fmt.Errorf("%s cluster: have Kafka create its offsets topic: %w", side.name, err)
			}
		}
		if _, err := fence.Acquire(ctx, side.cl, "mm2go-bench-init", time.Minute, nil); err != nil {
			return fmt.Errorf("%s cluster: have Kafka create its transaction state topic: %w", side.name, err)
		}
	}
	b.logf("Kafka's offsets and transaction state topics ready on both clusters in %s", time.Since(began).Round(time.Millisecond))
	return nil
}

// prepareBacklog writes the backlog, or with -reuse-clusters keeps one that
// has the asked shape.
func (b *bench) prepareBacklog(ctx context.Context) error {
	o := b.o
	b.shape = newShape(o.valueSize, 1)
	topic := o.backlogTopic
	if st, err := describeSource(ctx, b.srcSeeds, topic); err == nil {
		last := st.last[0]
		if st.records == o.records && st.partitions == int32(o.partitions) && last != nil && len(last.Value) == o.valueSize {
			b.logf("reusing backlog %s: %d records in %d partitions", topic, st.records, st.partitions)
			b.src = st
		} else {
			b.logf("backlog %s exists with another shape; deleting it", topic)
			if _, err := b.srcAdm.DeleteTopics(ctx, topic); err != nil {
				return fmt.Errorf("delete old backlog: %w", err)
			}
			time.Sleep(time.Second)
		}
	}
	if b.src == nil {
		if err := produceBacklog(ctx, b.srcSeeds, topic, int32(o.partitions), o.records, b.shape, b.logf); err != nil {
			return err
		}
		st, err := describeSource(ctx, b.srcSeeds, topic)
		if err != nil {
			return err
		}
		if st.records != o.records {
			return fmt.Errorf("backlog holds %d records, want %d", st.records, o.records)
		}
		b.src = st
	}
	b.src.bytes = b.src.records * recordBytes(o.valueSize)
	b.src.diskBytes = dirSize(b.tb.dataDir("bsrc"), topic+"-")
	b.logf("backlog: %d records, %.1f MB payload, %.1f MB on disk", b.src.records, float64(b.src.bytes)/1e6, float64(b.src.diskBytes)/1e6)
	return nil
}

// buildMM2go builds ./cmd/mm2go into bin, from the working tree or, with
// rev, from that git revision exported next to bin. The binary is not
// stripped (unlike `make build`), so that perf can name its symbols; the
// code is the same. With pprof, the sources are copied next to bin and one
// file is added to the copy of cmd/mm2go that serves net/http/pprof on
// $MM2GO_BENCH_PPROF when that is set: the profiling harness, built apart
// from the measured binary.
func buildMM2go(ctx context.Context, rev, bin string, pprof bool) error {
	dir := "."
	if rev != "" || pprof {
		dir = bin + "-src"
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		// Working tree: tracked and untracked files, read only.
		script := `git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$2" 2>/dev/null; true`
		if rev != "" {
			script = `git archive --format=tar "$1" | tar -x -C "$2"`
		}
		c := exec.CommandContext(ctx, "sh", "-c", script, "sh", rev, dir)
		c.Stderr = os.Stderr
		if err := c.Run(); err != nil {
			return fmt.Errorf("export sources (revision %q): %w", rev, err)
		}
	}
	if pprof {
		const harness = "package main\n\n" +
			"import (\n\t\"net/http\"\n\t_ \"net/http/pprof\"\n\t\"os\"\n)\n\n" +
			"// Added by bench (profiling harness only): pprof on $MM2GO_BENCH_PPROF.\n" +
			"func init() {\n\tif addr := os.Getenv(\"MM2GO_BENCH_PPROF\"); addr != \"\" {\n" +
			"\t\tgo func() { _ = http.ListenAndServe(addr, nil) }()\n\t}\n}\n"
		if err := os.WriteFile(filepath.Join(dir, "cmd", "mm2go", "zz_bench_pprof.go"), []byte(harness), 0o644); err != nil {
			return fmt.Errorf("write pprof harness: %w", err)
		}
	}
	c := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/mm2go")
	c.Dir = dir
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("build mm2go: %w", err)
	}
	return nil
}

// shapeFor returns the record shape with values of valueSize bytes.
func (b *bench) shapeFor(valueSize int) *shape {
	if s, ok := b.shapes[valueSize]; ok {
		return s
	}
	if b.shapes == nil {
		b.shapes = map[int]*shape{}
	}
	s := newShape(valueSize, uint64(valueSize))
	b.shapes[valueSize] = s
	return s
}

// newID returns a short random id for aliases and topic names.
func newID() string {
	var p [3]byte
	_, _ = rand.Read(p[:])
	return hex.EncodeToString(p[:])
}
