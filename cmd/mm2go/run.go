package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/checkpoint"
	"github.com/mm2go/mm2go/config"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // a runtime failure
	exitUsage   = 2 // bad flags or a bad configuration file: nothing was started
)

const usage = `mm2go replicates Kafka topics between clusters, configured by MirrorMaker 2's properties file.

Usage:
  mm2go [run] -c FILE [flags]     run every enabled flow until SIGINT/SIGTERM (--stop-at-end: a one-shot
                                  migration up to the sources' ends at start, then exit)
  mm2go demo [flags]              replicate between two in-process Kafka clusters
  mm2go validate -c FILE [--connect]
                                  check a file and print the effective flows; --connect also
                                  lists, per flow, the topics it would replicate
  mm2go topology -c FILE          per cluster, the upstream clusters and hops (MM2's MirrorClient)
  mm2go status -c FILE [--flow A->B] [--partitions]
                                  per flow, the instances in its group and the tasks each runs
  mm2go offsets translate -c FILE --flow A->B --group G | --groups RE [--topic T] [--json]
                                  the groups' source offsets and their exact target offsets
                                  (also served as GET /api/v1/offsets?flow=A->B&group=RE)
  mm2go offsets apply -c FILE --flow A->B --group G
                                  commit them to the group on the target (refused while it has members)
  mm2go failover check -c FILE --flow A->B [--group G ...]
                                  exit 0 only when switching the groups' consumers to the target is safe
  mm2go cutover -c FILE --flow A->B --group G ... [--fence] [--state FILE] [--dry-run]
                                  switch the groups' producers and consumers to the target, step by
                                  step (fence, drain, final offsets, verify), resumable; --unfence
                                  removes the fence's ACLs
  mm2go verify -c FILE --flow A->B [--topics RE] [--since TIME] [--json]
                                  compare every copied record with its source record; exit 0 only
                                  when each is on the target once and unchanged, or explained
  mm2go version                   print the version

Run 'mm2go COMMAND -h' for a command's flags.
`

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 {
		switch args[0] {
		case "run", "demo", "validate", "topology", "status", "offsets", "failover", "cutover", "verify", "version", "help", "-h", "--help":
			cmd, args = args[0], args[1:]
		}
	}
	switch cmd {
	case "run":
		return runDaemon(args, stdout, stderr)
	case "demo":
		return runDemo(args, stdout, stderr)
	case "validate":
		return runValidate(args, stdout, stderr)
	case "topology":
		return runTopology(args, stdout, stderr)
	case "status":
		return runStatus(args, stdout, stderr)
	case "offsets":
		return runOffsets(args, stdout, stderr)
	case "failover":
		return runFailover(args, stdout, stderr)
	case "cutover":
		return runCutover(args, stdout, stderr)
	case "verify":
		return runVerify(args, stdout, stderr)
	case "version":
		_, _ = fmt.Fprintf(stdout, "mm2go %s (commit %s)\n", version, commit)
		return exitOK
	default:
		_, _ = fmt.Fprint(stdout, usage)
		return exitOK
	}
}

// commonFlags are the flags every long-running command takes.
type commonFlags struct {
	logLevel         string
	logFormat        string
	listen           string
	drainTimeout     time.Duration
	partitionMetrics bool
	mm2Names         bool
	pprof            bool
	maxBufferedBytes int64
	progressInterval time.Duration
	instanceID       string
	unreachableAfter time.Duration
	lagInterval      time.Duration
	maxSegments      int
}

func (c *commonFlags) register(fs *flag.FlagSet, listenDefault string) {
	fs.StringVar(&c.logLevel, "log.level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log.format", string(logConsole), "log format: console or json")
	fs.StringVar(&c.listen, "web.listen-address", listenDefault, "address of the status page (/), /metrics, /healthz, /readyz and /api/v1/offsets; empty disables it")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 10*time.Second, "at shutdown, how long each flow may take to write in-flight records and store its progress")
	fs.IntVar(&c.maxSegments, "checkpoint.max-segments", checkpoint.DefaultMaxSegments, "exact offset-map history each flow's checkpointer keeps in memory per source partition, in segments (a segment per transaction marker, restart or other gap); older history is thinned and translates approximately (MM2's rule: never skips, may re-deliver)")
	fs.DurationVar(&c.lagInterval, "lag-interval", 5*time.Second, "how often each flow refreshes its lag gauges and checks that its source and target answer (each check may take as long)")
	fs.DurationVar(&c.unreachableAfter, "ready.unreachable-after", time.Minute, "/readyz reports a flow not ready once its source or target cluster has not answered for this long (0: never)")
	fs.BoolVar(&c.partitionMetrics, "metrics.partitions", true, "export per-partition lag gauges (false keeps the series count independent of partition counts)")
	fs.BoolVar(&c.mm2Names, "metrics.mm2-names", false, "also export MirrorMaker 2's metric names as Strimzi's JMX exporter rules write them (kafka_connect_mirror_*, Connect worker, client and JVM series), so MM2's dashboards and alerts keep working")
	fs.DurationVar(&c.progressInterval, "log.progress-interval", 30*time.Second, "while a backlog is copied, how often each flow logs copied records, rate and ETA")
	fs.BoolVar(&c.pprof, "debug.pprof", false, "serve Go's profiler at /debug/pprof/ on the web listen address")
	host, _ := os.Hostname()
	fs.StringVar(&c.instanceID, "instance-id", host, "this process's identity in each flow's group on its target (static membership): unique per process; a process restarted with the same id takes over its flows at once. Default: the host name")
	fs.Int64Var(&c.maxBufferedBytes, "buffer.max-bytes", 0, "bound on the record bytes each flow holds in memory (fetched and not yet acknowledged), overriding the file's buffer.memory and fetch sizes; 0 keeps them")
}

// loadConfig loads the file and prints its warnings and errors. ok is false
// when the file is unusable.
func loadConfig(path string, log *zap.Logger, stderr io.Writer) (*config.Config, bool) {
	cfg, warns, err := config.Load(path)
	for _, w := range warns {
		log.Warn("config", zap.String("key", w.Key), zap.String("problem", w.Message))
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "mm2go: invalid configuration %s:\n", path)
		for _, line := range strings.Split(err.Error(), "\n") {
			_, _ = fmt.Fprintf(stderr, "  %s\n", line)
		}
		return nil, false
	}
	return cfg, true
}

// fileCommand registers -c and --config (into file) on a command's flag
// set, parses args and loads the file, which may also be given as the only
// argument, printing only its errors (warnings are `mm2go validate`'s
// business). It returns the configuration, or nil and the exit code.
func fileCommand(fs *flag.FlagSet, args []string, file *string, stderr io.Writer) (*config.Config, int) {
	fs.StringVar(file, "c", "", "MirrorMaker 2 properties file")
	fs.StringVar(file, "config", "", "same as -c")
	if err := fs.Parse(args); err != nil {
		return nil, parseFailed(err)
	}
	if *file == "" && fs.NArg() == 1 {
		*file = fs.Arg(0)
	} else if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "%s: unexpected arguments %v\n", fs.Name(), fs.Args())
		return nil, exitUsage
	}
	if *file == "" {
		_, _ = fmt.Fprintf(stderr, "%s: -c FILE is required\n", fs.Name())
		return nil, exitUsage
	}
	log, _, err := newLogger(stderr, "error", logConsole, prometheus.NewRegistry())
	if err != nil {
		return nil, exitUsage
	}
	cfg, ok := loadConfig(*file, log, stderr)
	if !ok {
		return nil, exitUsage
	}
	return cfg, exitOK
}

// flowNamed returns the flow SOURCE->TARGET of cfg (spaces around the
// aliases allowed), or nil.
func flowNamed(cfg *config.Config, name string) *config.Flow {
	src, dst, found := strings.Cut(name, "->")
	if !found {
		return nil
	}
	return cfg.Flow(strings.TrimSpace(src), strings.TrimSpace(dst))
}

// isHelp reports whether a command's first argument asks for its usage.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "help"
}

// parseFailed is the exit code after a command's flags failed to parse:
// 0 when -h or --help asked for the usage (printed by the flag set), 2 for
// bad flags.
func parseFailed(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

func runDaemon(args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("mm2go run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cf        commonFlags
		file      string
		clusters  string
		atEndFlag bool
	)
	fs.StringVar(&file, "c", "", "MirrorMaker 2 properties file (connect-mirror-maker.properties)")
	fs.StringVar(&file, "config", "", "same as -c")
	fs.StringVar(&clusters, "clusters", "", "comma-separated target cluster aliases: run only the flows into these (MM2's --clusters)")
	fs.BoolVar(&atEndFlag, "stop-at-end", false, "a one-shot migration: copy up to the sources' end offsets at start, commit the idle groups' offsets, verify every copied record, and exit (0 when all verified)")
	cf.register(fs, ":9464")
	// MM2's own command line takes the file as a positional argument, before
	// its flags (connect-mirror-maker.sh mm2.properties --clusters B): flags
	// are parsed on both sides of it.
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return parseFailed(err)
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch {
	case file == "" && len(positional) == 1:
		file = positional[0]
	case len(positional) > 0:
		_, _ = fmt.Fprintf(stderr, "mm2go: unexpected arguments %v\n", positional)
		return exitUsage
	}
	if file == "" {
		_, _ = fmt.Fprintln(stderr, "mm2go: -c FILE is required (the MirrorMaker 2 properties file)")
		return exitUsage
	}
	if cf.maxSegments < 2 {
		_, _ = fmt.Fprintf(stderr, "mm2go: --checkpoint.max-segments: %d is below 2\n", cf.maxSegments)
		return exitUsage
	}

	reg := prometheus.NewRegistry()
	log, lvl, err := newLogger(stderr, cf.logLevel, logFormat(cf.logFormat), reg)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "mm2go: %v\n", err)
		return exitUsage
	}
	defer func() { _ = log.Sync() }()
	cfg, ok := loadConfig(file, log, stderr)
	if !ok {
		return exitUsage
	}
	var targets []string
	if clusters != "" {
		for _, c := range strings.Split(clusters, ",") {
			targets = append(targets, strings.TrimSpace(c))
		}
	}
	d, err := newDaemon(daemonOptions{
		Config:           cfg,
		Targets:          targets,
		Log:              log,
		Level:            lvl,
		Registry:         reg,
		ListenAddress:    cf.listen,
		DrainTimeout:     cf.drainTimeout,
		PartitionMetrics: cf.partitionMetrics,
		MM2Names:         cf.mm2Names,
		Notifier:         newNotifier(os.Getenv("NOTIFY_SOCKET")),
		Pprof:            cf.pprof,
		MaxBufferedBytes: cf.maxBufferedBytes,
		ProgressInterval: cf.progressInterval,
		InstanceID:       cf.instanceID,
		UnreachableAfter: cf.unreachableAfter,
		LagInterval:      cf.lagInterval,
		MaxSegments:      cf.maxSegments,
	})
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "mm2go: %v\n", err)
		if errors.Is(err, errListen) {
			return exitFailure
		}
		return exitUsage
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		s := <-sigs
		log.Info("signal received; draining", zap.String("signal", s.String()))
		cancel()
		s = <-sigs
		log.Warn("second signal; exiting without draining", zap.String("signal", s.String()))
		_ = log.Sync()
		os.Exit(exitFailure)
	}()
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer signal.Stop(hups)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hups:
				reload(ctx, d, file, log)
			}
		}
	}()
	atEnd := make(chan int, 1)
	if atEndFlag {
		flows, err := d.selectFlows(cfg)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "mm2go: %v\n", err)
			return exitUsage
		}
		var enabled []*config.Flow
		for _, f := range flows {
			if f.Enabled {
				enabled = append(enabled, f)
			}
		}
		sort.Slice(enabled, func(i, j int) bool { return enabled[i].Name() < enabled[j].Name() })
		go func() {
			code := stopAtEnd(ctx, enabled, log)
			if ctx.Err() == nil {
				log.Info("--stop-at-end: done; stopping", zap.Int("exit_code", code))
				atEnd <- code
				cancel()
			}
		}()
	}
	if err := d.Run(ctx); err != nil {
		log.Error("stopped", zap.Error(err))
		return exitFailure
	}
	select {
	case code := <-atEnd:
		return code
	default:
		return exitOK
	}
}

// reload re-reads the file and hands it to the daemon, which restarts only
// the flows whose settings changed. A file that does not load leaves the
// running configuration in place; both outcomes are logged and exported as
// mm2go_config_last_reload_successful.
func reload(ctx context.Context, d *daemon, file string, log *zap.Logger) {
	log.Info("reloading configuration", zap.String("file", file))
	cfg, warns, err := config.Load(file)
	for _, w := range warns {
		log.Warn("config", zap.String("key", w.Key), zap.String("problem", w.Message))
	}
	if err != nil {
		d.m.reloaded(false)
		for _, line := range strings.Split(err.Error(), "\n") {
			log.Error("reload refused: invalid configuration; the previous one keeps running", zap.String("problem", line))
		}
		return
	}
	if err := d.Reload(ctx, cfg); err != nil {
		log.Error("reload refused; the previous configuration keeps running", zap.Error(err))
		return
	}
	log.Info("configuration reloaded")
}
