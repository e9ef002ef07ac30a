package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/checkpoint"
	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/loop"
	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

// selectorFor builds the topic selection of a flow, as its replicator does.
func selectorFor(f *config.Flow) (policy.TopicSelector, error) {
	topics, err := policy.NewFilter(f.Topics, f.TopicsExclude)
	if err != nil {
		return policy.TopicSelector{}, err
	}
	return policy.TopicSelector{
		Policy:                policyFor(f),
		Topics:                topics,
		HeartbeatsReplication: f.HeartbeatsReplicationEnabled,
		TargetAlias:           f.Target,
	}, nil
}

// offlineFlow is what the offsets and failover commands need of a flow:
// its settings and short-lived clients on both clusters.
type offlineFlow struct {
	flow   *config.Flow
	sel    policy.TopicSelector
	srcAdm *kadm.Client
	srcCl  *kgo.Client // srcAdm's client
	tgtAdm *kadm.Client
	reader *kgo.Client
	close  func()
	// newClient makes another client of the flow's, in a role, with the
	// command's logger; the caller closes it.
	newClient func(config.Role, ...kgo.Opt) (*kgo.Client, error)
}

// flowFlags are the flags shared by the offsets and failover commands.
type flowFlags struct {
	file, flow string
	timeout    time.Duration
}

func (ff *flowFlags) register(fs *flag.FlagSet, timeout time.Duration) {
	fs.StringVar(&ff.file, "c", "", "MirrorMaker 2 properties file")
	fs.StringVar(&ff.file, "config", "", "same as -c")
	fs.StringVar(&ff.flow, "flow", "", "the replication flow, as SOURCE->TARGET (may be left out when the file enables only one)")
	fs.DurationVar(&ff.timeout, "timeout", timeout, "how long the command may take")
}

// open loads the file, picks the flow and creates the clients.
func (ff *flowFlags) open(stderr io.Writer) (*offlineFlow, int) {
	if ff.file == "" {
		_, _ = fmt.Fprintln(stderr, "mm2go: -c FILE is required")
		return nil, exitUsage
	}
	log, _, err := newLogger(stderr, "error", logConsole, prometheus.NewRegistry())
	if err != nil {
		return nil, exitUsage
	}
	cfg, ok := loadConfig(ff.file, log, stderr)
	if !ok {
		return nil, exitUsage
	}
	var f *config.Flow
	if ff.flow == "" {
		if en := cfg.EnabledFlows(); len(en) == 1 {
			f = en[0]
		} else {
			_, _ = fmt.Fprintln(stderr, "mm2go: --flow SOURCE->TARGET is required: the file enables several flows")
			return nil, exitUsage
		}
	} else {
		if f = flowNamed(cfg, ff.flow); f == nil {
			_, _ = fmt.Fprintf(stderr, "mm2go: --flow %q: no such flow in %s\n", ff.flow, ff.file)
			return nil, exitUsage
		}
	}
	sel, err := selectorFor(f)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "mm2go: %v\n", err)
		return nil, exitUsage
	}
	of, err := openOffline(f, sel, log)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "mm2go: %v\n", err)
		return nil, exitFailure
	}
	return of, exitOK
}

// openOffline creates the short-lived clients of a flow that the operator
// commands (and --stop-at-end) use, logging through log at error level.
func openOffline(f *config.Flow, sel policy.TopicSelector, log *zap.Logger) (*offlineFlow, error) {
	// A new slice: extra may be a caller's slice with room to spare, shared
	// by clients created concurrently (verify's readers).
	mk := func(r config.Role, extra ...kgo.Opt) (*kgo.Client, error) {
		return kgo.NewClient(slices.Concat(f.Client(r).Opts(), extra, []kgo.Opt{kgo.WithLogger(kgoLogger(log, zap.NewAtomicLevelAt(zap.ErrorLevel)))})...)
	}
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	src, err := mk(config.RoleSourceAdmin)
	if err != nil {
		return nil, err
	}
	closers = append(closers, src.Close)
	tgt, err := mk(config.RoleTargetAdmin)
	if err != nil {
		closeAll()
		return nil, err
	}
	closers = append(closers, tgt.Close)
	reader, err := mk(config.RoleTargetConsumer, itopic.ReaderOpts()...)
	if err != nil {
		closeAll()
		return nil, err
	}
	closers = append(closers, reader.Close)
	return &offlineFlow{flow: f, sel: sel, srcAdm: kadm.NewClient(src), srcCl: src, tgtAdm: kadm.NewClient(tgt), reader: reader, close: closeAll, newClient: mk}, nil
}

const offsetsUsage = `usage: mm2go offsets translate -c FILE [--flow A->B] --group G | --groups RE [--topic T] [--json]
       mm2go offsets apply -c FILE [--flow A->B] --group G [--topic T]`

// runOffsets is `mm2go offsets translate|apply`.
func runOffsets(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "translate" && args[0] != "apply") {
		if len(args) > 0 && isHelp(args[0]) {
			_, _ = fmt.Fprintln(stdout, offsetsUsage)
			return exitOK
		}
		_, _ = fmt.Fprintln(stderr, offsetsUsage)
		return exitUsage
	}
	sub := args[0]
	fs := flag.NewFlagSet("mm2go offsets "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		ff          flowFlags
		group       string
		topic       string
		allowRewind bool
		noLocal     bool
		fromCps     bool
		groups      string
		asJSON      bool
	)
	ff.register(fs, time.Minute)
	fs.StringVar(&group, "group", "", "consumer group (required, unless --groups)")
	fs.StringVar(&topic, "topic", "", "only this source topic")
	if sub == "translate" {
		fs.StringVar(&groups, "groups", "", "every source group matching these regular expressions (comma-separated, Java syntax, as the file's groups)")
		fs.BoolVar(&asJSON, "json", false, "print the offsets as JSON, the document GET /api/v1/offsets returns")
	}
	if sub == "apply" {
		fs.BoolVar(&allowRewind, "allow-rewind", false, "also commit offsets lower than the group's current ones on the target")
		fs.BoolVar(&noLocal, "no-local-topics", false, "do not set the group's offsets on local target topics named like the replicated ones")
		fs.BoolVar(&fromCps, "from-checkpoints", false, "commit the group's last checkpoints, read from the target alone (for when the source cluster is gone; at least once: the group may read again what it consumed after the last checkpoint)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return parseFailed(err)
	}
	if sub == "translate" {
		return runTranslate(ff, group, groups, topic, asJSON, stdout, stderr)
	}
	if group == "" {
		_, _ = fmt.Fprintln(stderr, "mm2go: --group is required")
		return exitUsage
	}
	of, code := ff.open(stderr)
	if of == nil {
		return code
	}
	defer of.close()
	ctx, cancel := context.WithTimeout(context.Background(), ff.timeout)
	defer cancel()

	var (
		idx  *checkpoint.Index
		offs []checkpoint.GroupOffset
		err  error
	)
	if fromCps {
		var newest time.Time
		offs, newest, err = checkpoint.LastCheckpoints(ctx, of.reader, of.sel.Policy.CheckpointsTopic(of.flow.Source), of.sel.Policy, of.flow.Source, group)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "mm2go: %v\n", err)
			return exitFailure
		}
		if topic != "" {
			offs = slices.DeleteFunc(offs, func(o checkpoint.GroupOffset) bool { return o.Topic != topic })
		}
		if len(offs) == 0 {
			_, _ = fmt.Fprintf(stderr, "mm2go: group %s has no checkpoint in %s on %s\n", group, of.sel.Policy.CheckpointsTopic(of.flow.Source), of.flow.Target)
			return exitFailure
		}
		_, _ = fmt.Fprintf(stdout, "last checkpoints of group %s, the newest written %s ago (%s): the group may read again what it consumed after them\n",
			group, time.Since(newest).Round(time.Second), newest.UTC().Format(time.RFC3339))
	} else {
		idx, err = of.loadIndex(ctx, stderr)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "mm2go: %v\n", err)
			return exitFailure
		}
		offs, err = checkpoint.Translate(ctx, of.srcAdm, idx, of.sel, of.flow.Source, group, topic)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "mm2go: %v\n", err)
			return exitFailure
		}
	}
	printTranslations(stdout, of.flow.Name(), group, translated(group, offs))
	if idx == nil {
		idx = checkpoint.NewIndex(0, nil) // no offset map: nothing to lower to
	}
	res, err := checkpoint.Apply(ctx, of.tgtAdm, group, offs, checkpoint.ApplyOptions{
		AllowRewind:     allowRewind,
		InitLocalTopics: !noLocal,
		Policy:          of.sel.Policy,
		Source:          of.flow.Source,
		Index:           idx,
	})
	printApplied(stdout, res)
	if err != nil {
		if errors.Is(err, checkpoint.ErrGroupActive) {
			_, _ = fmt.Fprintf(stderr, "mm2go: group %s has members on %s; stop its consumers first: %v\n", group, of.flow.Target, err)
		} else {
			_, _ = fmt.Fprintf(stderr, "mm2go: %v\n", err)
		}
		return exitFailure
	}
	return exitOK
}

func printTranslations(w io.Writer, flow, group string, offs []translatedOffset) {
	_, _ = fmt.Fprintf(w, "group %s, flow %s\n", group, flow)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "SOURCE TOPIC\tPARTITION\tSOURCE OFFSET\tTARGET TOPIC\tTARGET OFFSET\tMODE")
	for _, o := range offs {
		target, mode := "-", "unknown (nothing replicated)"
		if o.TargetOffset != nil {
			target, mode = fmt.Sprint(*o.TargetOffset), o.Mode
		}
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", o.Topic, o.Partition, o.SourceOffset, o.RemoteTopic, target, mode)
	}
	_ = tw.Flush()
}

func printApplied(w io.Writer, res checkpoint.ApplyResult) {
	for _, o := range res.Overlaps {
		_, _ = fmt.Fprintf(w, "warning: %s[%d]: other producers' records lie between replicated records; committing %d so none is lost (replicated records after it are delivered again)\n", o.Topic, o.Partition, o.Offset)
	}
	for _, c := range res.Committed {
		_, _ = fmt.Fprintf(w, "committed %+v\n", c)
	}
	for _, s := range res.Skipped {
		_, _ = fmt.Fprintf(w, "skipped   %+v\n", s)
	}
}

// runFailover is `mm2go failover check`.
func runFailover(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "check" {
		if len(args) > 0 && isHelp(args[0]) {
			_, _ = fmt.Fprintln(stdout, "usage: mm2go failover check -c FILE [--flow A->B] [--group G ...] [--wait] [--timeout D]")
			return exitOK
		}
		_, _ = fmt.Fprintln(stderr, "usage: mm2go failover check -c FILE [--flow A->B] [--group G ...] [--wait] [--timeout D]")
		return exitUsage
	}
	fs := flag.NewFlagSet("mm2go failover check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		ff     flowFlags
		groups multiFlag
		wait   bool
		every  time.Duration
	)
	ff.register(fs, time.Minute)
	fs.Var(&groups, "group", "consumer group to check (repeatable; default: every group the flow checkpoints)")
	fs.BoolVar(&wait, "wait", false, "check again until it is safe or --timeout passed, printing what it waits for")
	fs.DurationVar(&every, "interval", 500*time.Millisecond, "with --wait, the time between two checks")
	if err := fs.Parse(args[1:]); err != nil {
		return parseFailed(err)
	}
	of, code := ff.open(stderr)
	if of == nil {
		return code
	}
	defer of.close()
	ctx, cancel := context.WithTimeout(context.Background(), ff.timeout)
	defer cancel()

	if len(groups) == 0 {
		var err error
		if groups, err = flowGroups(ctx, of.srcAdm, of.flow, of.sel); err != nil {
			_, _ = fmt.Fprintf(stderr, "mm2go: %v\n", err)
			return exitFailure
		}
		if len(groups) == 0 {
			_, _ = fmt.Fprintf(stderr, "mm2go: no consumer group on %s has offsets on the topics flow %s replicates (groups = %s, groups.exclude = %s): nothing to check; name a group with --group\n",
				of.flow.Source, of.flow.Name(), strings.Join(of.flow.Groups, ", "), strings.Join(of.flow.GroupsExclude, ", "))
			return exitFailure
		}
	}
	start := time.Now()
	var waitingFor string
	for {
		rep, err := checkFailover(ctx, of, groups, stderr)
		switch {
		case err != nil && (!wait || ctx.Err() != nil):
			_, _ = fmt.Fprintf(stderr, "mm2go: %v\n", err)
			return exitFailure
		case err != nil:
			_, _ = fmt.Fprintf(stdout, "%s check failed, trying again: %v\n", time.Since(start).Round(time.Millisecond), err)
		case rep.Safe() || !wait:
			printReport(stdout, of.flow, rep)
			if !rep.Safe() {
				_, _ = fmt.Fprintln(stdout, "NOT SAFE to switch consumers yet")
				return exitFailure
			}
			if wait {
				_, _ = fmt.Fprintf(stdout, "safe after %s\n", time.Since(start).Round(time.Millisecond))
			}
			_, _ = fmt.Fprintln(stdout, "SAFE to switch consumers")
			return exitOK
		default:
			if w := waitSummary(rep); w != waitingFor {
				waitingFor = w
				_, _ = fmt.Fprintf(stdout, "%s waiting for: %s\n", time.Since(start).Round(time.Millisecond), w)
			}
		}
		if !loop.Sleep(ctx, every) {
			if rep, err := checkFailover(context.Background(), of, groups, stderr); err == nil {
				printReport(stdout, of.flow, rep)
			}
			_, _ = fmt.Fprintf(stdout, "NOT SAFE to switch consumers after waiting %s\n", time.Since(start).Round(time.Millisecond))
			return exitFailure
		}
	}
}

// flowGroups returns the source groups the flow checkpoints: those its
// groups and groups.exclude select with offsets on its replicated topics.
func flowGroups(ctx context.Context, srcAdm *kadm.Client, f *config.Flow, sel policy.TopicSelector) ([]string, error) {
	gf, err := policy.NewFilter(f.Groups, f.GroupsExclude)
	if err != nil {
		return nil, err
	}
	return checkpoint.SelectGroups(ctx, srcAdm, gf, sel)
}

// checkFailover loads the offset map and runs the failover check once.
func checkFailover(ctx context.Context, of *offlineFlow, groups []string, stderr io.Writer) (checkpoint.Report, error) {
	idx, err := of.loadIndex(ctx, stderr)
	if err != nil {
		return checkpoint.Report{}, err
	}
	return checkpoint.Check(ctx, of.srcAdm, of.tgtAdm, idx, of.sel, of.flow.Source, groups,
		checkpoint.CheckOptions{ReadCommitted: of.flow.SourceIsolationLevel == config.ReadCommitted})
}

// loadIndex reads the flow's offset map and then, on the target, the gaps
// between replicated records (a fencing writer's abort markers are not
// other producers' records); a gap it could not read is named on stderr and
// counts as other producers' records.
func (of *offlineFlow) loadIndex(ctx context.Context, stderr io.Writer) (*checkpoint.Index, error) {
	idx, warn, err := loadIndex(ctx, of.reader, of.flow, of.sel)
	if warn != nil {
		_, _ = fmt.Fprintf(stderr, "mm2go: warning: %v\n", warn)
	}
	return idx, err
}

// loadIndex reads the flow's offset map into an index with reader (see
// itopic.ReadAll) and classifies its gaps on the target. warn says what
// could not be classified: until it is, it counts as records of other
// producers.
func loadIndex(ctx context.Context, reader *kgo.Client, f *config.Flow, sel policy.TopicSelector) (idx *checkpoint.Index, warn, err error) {
	idx, err = checkpoint.LoadIndex(ctx, reader, offsetmap.Topic(f.Source), 0)
	if err != nil {
		return nil, nil, err
	}
	remote := func(t string) string { return sel.Policy.FormatRemoteTopic(f.Source, t) }
	if err := idx.ClassifyGaps(ctx, reader, remote); err != nil {
		warn = fmt.Errorf("%w; until it is read it counts as records of other producers", err)
	}
	return idx, warn, nil
}

func printReport(w io.Writer, f *config.Flow, rep checkpoint.Report) {
	for _, g := range rep.Groups {
		status := "SAFE"
		if len(g.Failures) > 0 {
			status = "NOT SAFE"
		}
		_, _ = fmt.Fprintf(w, "group %s: %s (%d partitions; on %s: state %s, %d members)\n", g.Group, status, g.Partitions, f.Target, g.State, g.Members)
		for _, fl := range g.Failures {
			_, _ = fmt.Fprintf(w, "  %s[%d] -> %s: %s: %s\n", fl.Topic, fl.Partition, fl.RemoteTopic, fl.Reason, fl.Detail)
		}
	}
}

// waitSummary says in one line what a report that is not safe waits for:
// per group, each reason with the number of partitions it holds back.
func waitSummary(rep checkpoint.Report) string {
	if len(rep.Groups) == 0 {
		return "no group to check"
	}
	var parts []string
	for _, g := range rep.Groups {
		if len(g.Failures) == 0 {
			continue
		}
		counts := make(map[checkpoint.FailureReason]int)
		var order []checkpoint.FailureReason
		for _, f := range g.Failures {
			if counts[f.Reason] == 0 {
				order = append(order, f.Reason)
			}
			counts[f.Reason]++
		}
		var rs []string
		for _, r := range order {
			rs = append(rs, fmt.Sprintf("%s (%d)", r, counts[r]))
		}
		parts = append(parts, fmt.Sprintf("group %s: %s", g.Group, strings.Join(rs, ", ")))
	}
	return strings.Join(parts, "; ")
}

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
