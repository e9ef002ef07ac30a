package main

import (
	"context"
	"flag"
	"fmt"
	"io"
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
// instances are in the flow's lease group and which one runs the flow.
//
// It exits 0 when an instance runs every flow listed, 1 when one runs none
// (or its target could not be asked), 2 for bad flags or a bad file.
func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mm2go status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		file, only string
		timeout    time.Duration
	)
	fs.StringVar(&only, "flow", "", "only this flow, as SOURCE->TARGET (default: every enabled flow)")
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for each target cluster")
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
		st, err := describeLease(f, group, topic, timeout)
		if err != nil {
			_, _ = fmt.Fprintf(stdout, "flow %s: lease group %s on %s: unavailable\n", f.Name(), group, f.Target)
			_, _ = fmt.Fprintf(stderr, "mm2go status: flow %s: %v\n", f.Name(), err)
			code = exitFailure
			continue
		}
		if !printLease(stdout, f, group, st) {
			code = exitFailure
		}
	}
	return code
}

// describeLease asks the flow's target about its lease group.
func describeLease(f *config.Flow, group, topic string, timeout time.Duration) (fence.Status, error) {
	cl, err := kgo.NewClient(f.Client(config.RoleTargetAdmin).Opts()...)
	if err != nil {
		return fence.Status{}, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return fence.Describe(ctx, kadm.NewClient(cl), group, topic)
}

// printLease prints a flow's lease group and reports whether an instance
// runs the flow.
func printLease(w io.Writer, f *config.Flow, group string, st fence.Status) bool {
	holder, held := st.Holder()
	switch {
	case st.State == "":
		_, _ = fmt.Fprintf(w, "flow %s: NOT RUNNING: no instance ever joined the lease group %s on %s\n", f.Name(), group, f.Target)
		return false
	case held:
		_, _ = fmt.Fprintf(w, "flow %s: running on %s; lease group %s on %s (%s), %d instance(s)\n",
			f.Name(), nameOf(holder), group, f.Target, st.State, len(st.Members))
	default:
		_, _ = fmt.Fprintf(w, "flow %s: NOT RUNNING: no instance holds the lease; lease group %s on %s (%s), %d instance(s)\n",
			f.Name(), group, f.Target, st.State, len(st.Members))
	}
	if len(st.Members) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(tw, "  INSTANCE\tROLE\tHOST\tCLIENT")
		for _, m := range st.Members {
			role := "standby"
			if m.Holds {
				role = "runs the flow"
			}
			_, _ = fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", nameOf(m), role, m.Host, m.ClientID)
		}
		_ = tw.Flush()
	}
	return held
}

// nameOf is a member's instance id, or a mark that it has none.
func nameOf(m fence.Member) string {
	if m.InstanceID == "" {
		return "(no instance id)"
	}
	return m.InstanceID
}
