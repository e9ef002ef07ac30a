package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/fence"
	"github.com/mm2go/mm2go/policy"
)

// runStatus is `mm2go status -c FILE`: for every enabled flow (or the one
// --flow names) it asks the target's group coordinator which mm2go
// instances are in the flow's group and which tasks each runs, and the
// source which partitions each task copies.
//
// It exits 0 when every task of every flow listed runs, 1 when one does not
// (or a target could not be asked), 2 for bad flags or a bad file.
func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mm2go status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		file, only string
		timeout    time.Duration
		partitions bool
	)
	fs.StringVar(&only, "flow", "", "only this flow, as SOURCE->TARGET (default: every enabled flow)")
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for each cluster")
	fs.BoolVar(&partitions, "partitions", false, "list the source partitions each instance copies")
	cfg, code := fileCommand(fs, args, &file, stderr)
	if cfg == nil {
		return code
	}
	flows := cfg.EnabledFlows()
	if only != "" {
		flows = nil
		if f := flowNamed(cfg, only); f != nil && f.Enabled {
			flows = append(flows, f)
		}
	}
	if len(flows) == 0 {
		_, _ = fmt.Fprintf(stderr, "mm2go status: no enabled flow %q in %s\n", only, file)
		return exitUsage
	}

	code = exitOK
	for i, f := range flows {
		if i > 0 {
			_, _ = fmt.Fprintln(stdout)
		}
		group, topic := policy.LeaseGroup(f.Source), policy.LeaseTopic(f.Source)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		st, err := describeLease(ctx, f, group, topic)
		if err != nil {
			cancel()
			_, _ = fmt.Fprintf(stdout, "flow %s: group %s on %s: unavailable\n", f.Name(), group, f.Target)
			_, _ = fmt.Fprintf(stderr, "mm2go status: flow %s: %v\n", f.Name(), err)
			code = exitFailure
			continue
		}
		shares, err := taskShares(ctx, f, st.Tasks)
		cancel()
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "mm2go status: flow %s: partitions per task unknown: %v\n", f.Name(), err)
		}
		if !printLease(stdout, f, group, st, shares, partitions) {
			code = exitFailure
		}
	}
	return code
}

// describeLease asks the flow's target about its group.
func describeLease(ctx context.Context, f *config.Flow, group, topic string) (fence.Status, error) {
	cl, err := kgo.NewClient(f.Client(config.RoleTargetAdmin).Opts()...)
	if err != nil {
		return fence.Status{}, err
	}
	defer cl.Close()
	return fence.Describe(ctx, kadm.NewClient(cl), group, topic)
}

// taskShares returns, per task, the source partitions it copies (topic ->
// partitions); nil when the flow's source cannot be asked.
func taskShares(ctx context.Context, f *config.Flow, tasks int) ([]map[string][]int32, error) {
	if tasks <= 0 {
		return nil, nil
	}
	sel, err := selectorFor(f)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(f.Client(config.RoleSourceAdmin).Opts()...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	tds, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("list topics on %s: %w", f.Source, err)
	}
	out := make([]map[string][]int32, tasks)
	for i := range out {
		out[i] = make(map[string][]int32)
	}
	for _, td := range tds.Sorted() {
		if td.IsInternal || td.Err != nil || !sel.ShouldReplicate(td.Topic) {
			continue
		}
		for _, pd := range td.Partitions.Sorted() {
			t := policy.TaskOf(td.Topic, pd.Partition, tasks)
			out[t][td.Topic] = append(out[t][td.Topic], pd.Partition)
		}
	}
	return out, nil
}

// printLease prints a flow's group: which instance runs which tasks and how
// many source partitions that is (listed with all). It reports whether
// every task runs.
func printLease(w io.Writer, f *config.Flow, group string, st fence.Status, shares []map[string][]int32, all bool) bool {
	unowned := st.Unowned()
	running := 0
	for _, m := range st.Members {
		if len(m.Tasks) > 0 {
			running++
		}
	}
	switch {
	case st.State == "":
		_, _ = fmt.Fprintf(w, "flow %s: NOT RUNNING: no instance ever joined the group %s on %s\n", f.Name(), group, f.Target)
		return false
	case len(unowned) == 0:
		_, _ = fmt.Fprintf(w, "flow %s: %d of %d task(s) running on %d instance(s); group %s on %s (%s), %d member(s)\n",
			f.Name(), st.Tasks, st.Tasks, running, group, f.Target, st.State, len(st.Members))
	default:
		_, _ = fmt.Fprintf(w, "flow %s: NOT RUNNING: task(s) %s run nowhere (%d of %d running); group %s on %s (%s), %d member(s)\n",
			f.Name(), joinInts(unowned), st.Tasks-len(unowned), st.Tasks, group, f.Target, st.State, len(st.Members))
	}
	if len(st.Members) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(tw, "  INSTANCE\tTASKS\tPARTITIONS\tHOST\tCLIENT")
		for _, m := range st.Members {
			tasks, parts := "standby", "-"
			if len(m.Tasks) > 0 {
				tasks, parts = joinInts(m.Tasks), "?"
				if shares != nil {
					n := 0
					for _, t := range m.Tasks {
						for _, ps := range shares[t] {
							n += len(ps)
						}
					}
					parts = strconv.Itoa(n)
				}
			}
			_, _ = fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", nameOf(m), tasks, parts, m.Host, m.ClientID)
		}
		_ = tw.Flush()
	}
	if all && shares != nil {
		for _, m := range st.Members {
			for _, t := range m.Tasks {
				_, _ = fmt.Fprintf(w, "  %s task %d: %s\n", nameOf(m), t, formatShare(shares[t]))
			}
		}
		for _, t := range unowned {
			_, _ = fmt.Fprintf(w, "  (nobody) task %d: %s\n", t, formatShare(shares[t]))
		}
	}
	return st.State != "" && len(unowned) == 0
}

// formatShare is "orders[0,3,6] payments[1]".
func formatShare(share map[string][]int32) string {
	if len(share) == 0 {
		return "(no partitions)"
	}
	var b strings.Builder
	for i, t := range slices.Sorted(maps.Keys(share)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(t + "[" + joinInts(share[t]) + "]")
	}
	return b.String()
}

func joinInts(xs []int32) string {
	ss := make([]string, len(xs))
	for i, x := range xs {
		ss[i] = strconv.Itoa(int(x))
	}
	return strings.Join(ss, ",")
}

// nameOf is a member's instance id, or a mark that it has none.
func nameOf(m fence.Member) string {
	if m.InstanceID == "" {
		return "(no instance id)"
	}
	return m.InstanceID
}
