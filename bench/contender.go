package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// kind is how a replicating contender is run.
type kind int

const (
	kindMM2go    kind = iota // bin/mm2go -c FILE
	kindMM2                  // Apache MirrorMaker 2, testbed/mm2.sh run FILE
	kindCopyLoop             // this program's minimal franz-go copy loop
)

// contender is one replicator profile the benchmark runs.
type contender struct {
	name string
	kind kind
	// props are extra lines of the MM2 properties file; {S} and {T} stand
	// for the run's source and target aliases.
	props []string
	// env are extra environment entries of the process.
	env []string
	// args are extra command-line arguments (copy loop and mm2go).
	args []string
	// about says what the profile is, for the report.
	about string
	// instances is how many mm2go processes run on the same file (scale
	// phase; 0 or 1: one), each in a cgroup of cpuQuota CPUs when > 0.
	instances int
	cpuQuota  float64
	// throttle is the flow's mm2go.throttle.bytes.per.second (throttle
	// phase; 0: none) and throttled the bytes the limit counts over the
	// backlog.
	throttle, throttled int64
	// wan runs the contender in the WAN phase's namespace, reaching the
	// source over the link with rtt added (see wan.go); base is the
	// contender it is a copy of.
	wan  bool
	rtt  time.Duration
	base string
	// eos copies exactly once (the exactly-once phase, eos.go).
	eos bool
}

// Names of the contenders.
const (
	// nameMM2go and nameMM2goLean are mm2go in its default copy mode (the
	// batches mode: fetched batches forwarded without recompression), with
	// default and lean buffering.
	nameMM2go     = "mm2go"
	nameMM2goLean = "mm2go-lean"
	// nameMM2goBudget is mm2go with its in-memory record bytes bounded by
	// --buffer.max-bytes.
	nameMM2goBudget = "mm2go-budget"
	// nameMM2goOverlap is mm2go with two overlapping Fetch requests to a
	// far source while caught up (latency over a long link).
	nameMM2goOverlap = "mm2go-overlap"
	// nameMM2goRecords and nameMM2goRecordsLean are mm2go in the record
	// copy mode (records decoded and produced through franz-go's
	// producer), with default and lean buffering.
	nameMM2goRecords     = "mm2go-records"
	nameMM2goRecordsLean = "mm2go-records-lean"
	nameMM2              = "mm2"
	nameMM2Tuned         = "mm2-tuned"
	// nameMM2TunedWAN is mm2-tuned with the source consumer's socket
	// buffer left to the kernel, as a cross-region MM2 needs (the WAN
	// phase's best MM2).
	nameMM2TunedWAN = "mm2-tuned-wan"
	nameCopyLoop    = "copyloop"
)

// wanHeap is mm2-tuned-wan's heap unless -mm2-tuned-env sets one.
const wanHeap = "MM2_HEAP=4g"

// Names of the raw-limit measurements, which are not replicators.
const (
	perfProduce = "perf-produce"
	perfConsume = "perf-consume"
	perfCopy    = "perf-copy"
	direct      = "direct" // latency floor: the consumer reads the source topic
)

// recordsMode selects the record copy mode.
const recordsMode = "mm2go.copy.mode = records"

// fetchOverlap turns on overlapping Fetch requests to a far source.
const fetchOverlap = "mm2go.fetch.overlap.enabled = true"

// splitProps splits a ";"-separated list of property lines.
func splitProps(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ";") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// contenders returns the replicator profiles. The tuned profiles' lines can
// be replaced from the command line (see the -*-tuned flags).
func contenders(o *options) []*contender {
	about := func(what, props, env string) string {
		s := what
		if props != "" {
			s += ": `" + props + "`"
		}
		if env != "" {
			s += ", environment `" + env + "`"
		}
		return s
	}
	tuned := &contender{name: nameMM2Tuned, kind: kindMM2, props: splitProps(o.mm2Tuned), env: strings.Fields(o.mm2TunedEnv),
		about: about("Apache MM2 tuned for throughput", o.mm2Tuned, o.mm2TunedEnv)}
	const kernelBuffers = "{S}.consumer.receive.buffer.bytes = -1"
	tunedWAN := *tuned
	tunedWAN.name, tunedWAN.props = nameMM2TunedWAN, append(slices.Clone(tuned.props), kernelBuffers)
	// With the socket buffer autotuned, the tuned fetch sizes of its four
	// tasks fill more than the stock 2 GiB heap from a near source (out of
	// memory in every 0 ms copy): a profile tuned for a long link gets a
	// heap to match.
	tunedWAN.env = slices.Clone(tuned.env)
	if !slices.ContainsFunc(tunedWAN.env, func(e string) bool { return strings.HasPrefix(e, "MM2_HEAP=") }) {
		tunedWAN.env = append(tunedWAN.env, wanHeap)
	}
	tunedWAN.about = about("Apache MM2 tuned for throughput, its source consumer's socket buffer autotuned by the kernel (Java's default is a fixed 64 KiB)",
		o.mm2Tuned+"; "+kernelBuffers, strings.Join(tunedWAN.env, " "))
	return []*contender{
		{name: nameMM2go, kind: kindMM2go, about: "mm2go, default settings (the batches copy mode)"},
		{name: nameMM2goLean, kind: kindMM2go, props: splitProps(o.mm2goLean),
			about: about("mm2go with smaller fetches (memory)", o.mm2goLean, "")},
		{name: nameMM2goBudget, kind: kindMM2go, args: []string{"--buffer.max-bytes", o.mm2goBudget},
			about: "mm2go with `--buffer.max-bytes " + o.mm2goBudget + "` (in-memory record bytes bounded by the flag)"},
		{name: nameMM2goOverlap, kind: kindMM2go, props: []string{fetchOverlap},
			about: "mm2go with overlapping fetches from a far source while caught up: `" + fetchOverlap + "`"},
		{name: nameMM2goRecords, kind: kindMM2go, props: []string{recordsMode},
			about: "mm2go in the record copy mode: `" + recordsMode + "`"},
		{name: nameMM2goRecordsLean, kind: kindMM2go, props: append([]string{recordsMode}, splitProps(o.mm2goRecordsLean)...),
			env:   strings.Fields(o.mm2goRecordsLeanEnv),
			about: about("mm2go in the record copy mode with less buffering (memory and latency)", recordsMode+"; "+o.mm2goRecordsLean, o.mm2goRecordsLeanEnv)},
		{name: nameMM2, kind: kindMM2, about: "Apache MM2 dedicated mode, default settings"},
		tuned,
		&tunedWAN,
		{name: nameCopyLoop, kind: kindCopyLoop, args: strings.Fields(o.copyArgs),
			about: "minimal franz-go consume-produce loop (`go run ./bench copyloop`), `" + o.copyArgs + "`"},
	}
}

// configLines is the MM2 properties file of a run of c: flow src->dst
// replicating topic, every replication factor 1 (single-broker clusters),
// then the contender's own lines.
func (c *contender) configLines(src, dst string, srcSeeds, dstSeeds []string, topic string) []string {
	lines := []string{
		"clusters = " + src + ", " + dst,
		src + ".bootstrap.servers = " + strings.Join(srcSeeds, ","),
		dst + ".bootstrap.servers = " + strings.Join(dstSeeds, ","),
		src + "->" + dst + ".enabled = true",
		src + "->" + dst + ".topics = " + topic,
		dst + "->" + src + ".enabled = false",
		"replication.factor = 1",
		"offset-syncs.topic.replication.factor = 1",
		"checkpoints.topic.replication.factor = 1",
		"heartbeats.topic.replication.factor = 1",
		"offset.storage.replication.factor = 1",
		// No authorizer on the benchmark brokers: ACL sync would only log
		// errors.
		"sync.topic.acls.enabled = false",
		// Both tools would otherwise also run the disabled reverse flow's
		// heartbeats into the source (MM2's default), which the forward
		// flow then copies: not part of what is measured.
		dst + "->" + src + ".emit.heartbeats.enabled = false",
	}
	if c.kind == kindMM2 {
		lines = append(lines,
			"status.storage.replication.factor = 1",
			"config.storage.replication.factor = 1",
			// Start-up only: skip the plugin class scan (testbed README §5).
			"plugin.discovery = service_load",
			src+".plugin.discovery = service_load",
			dst+".plugin.discovery = service_load",
		)
	}
	for _, p := range c.props {
		lines = append(lines, strings.NewReplacer("{S}", src, "{T}", dst).Replace(p))
	}
	return lines
}

// launch describes the process of one run of a replicating contender.
type launch struct {
	src, dst string // aliases
	topic    string // source topic
	remote   string // target topic
	dir      string // run directory: config and log
	pprof    bool   // profile run: use the mm2go with pprof
}

// command returns the process that replicates l.topic for contender c; its
// output goes to l.dir/process.log (which the caller creates and closes).
func (b *bench) command(ctx context.Context, c *contender, l launch) (*exec.Cmd, error) {
	cmd, err := b.commandHere(ctx, c, l)
	if err != nil || !c.wan {
		return cmd, err
	}
	return inNamespace(ctx, cmd), nil
}

// seeds returns the bootstrap servers contender c uses: loopback, or the
// brokers' WAN listeners from the WAN phase's namespace.
func (b *bench) seeds(c *contender) (src, dst []string) {
	if !c.wan {
		return b.srcSeeds, b.dstSeeds
	}
	return []string{fmt.Sprintf("%s:%d", wanSourceAddr, b.o.srcPort+wanPortOffset)},
		[]string{fmt.Sprintf("%s:%d", wanTargetAddr, b.o.dstPort+wanPortOffset)}
}

// commandHere is command without the namespace.
func (b *bench) commandHere(ctx context.Context, c *contender, l launch) (*exec.Cmd, error) {
	srcSeeds, dstSeeds := b.seeds(c)
	switch c.kind {
	case kindCopyLoop:
		args := []string{"copyloop", "-src", strings.Join(srcSeeds, ","), "-dst", strings.Join(dstSeeds, ","),
			"-topic", l.topic, "-to", l.remote}
		cmd := exec.CommandContext(ctx, b.self, slices.Concat(args, c.args)...)
		cmd.Env = append(os.Environ(), c.env...)
		return cmd, nil
	case kindMM2go, kindMM2:
		cfg := filepath.Join(l.dir, "mm2.properties")
		lines := c.configLines(l.src, l.dst, srcSeeds, dstSeeds, l.topic)
		if err := os.WriteFile(cfg, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("write config: %w", err)
		}
		if c.kind == kindMM2 {
			// mm2.sh run execs the JVM, so the child's pid is MM2's.
			return b.tb.cmd(ctx, c.env, "mm2.sh", "run", cfg), nil
		}
		bin := b.mm2go
		cmd := exec.CommandContext(ctx, bin, slices.Concat([]string{"-c", cfg, "--web.listen-address", ""}, c.args)...)
		cmd.Env = append(os.Environ(), c.env...)
		if l.pprof && b.mm2goPprof != "" {
			cmd.Path, cmd.Args[0] = b.mm2goPprof, b.mm2goPprof
			cmd.Env = append(cmd.Env, "MM2GO_BENCH_PPROF="+b.o.pprofAddr)
		}
		return cmd, nil
	}
	return nil, fmt.Errorf("unknown contender kind %d", c.kind)
}
