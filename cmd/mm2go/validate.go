package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/config"
)

// runValidate implements `mm2go validate -c FILE [--connect]`: it loads the
// file, prints the effective configuration with secrets masked and, with
// --connect, connects to the clusters of every enabled flow and lists what
// the flow would replicate. Exit codes: 0 when everything worked, 2 for bad
// flags or a bad file, 1 when a cluster could not be reached, logged in to
// or listed.
func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mm2go validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		file    string
		connect bool
	)
	fs.StringVar(&file, "c", "", "MirrorMaker 2 properties file")
	fs.StringVar(&file, "config", "", "same as -c")
	fs.BoolVar(&connect, "connect", false, "also connect to the clusters of every enabled flow and list the topics it would replicate, their remote names and partition counts")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	if file == "" && fs.NArg() == 1 {
		file = fs.Arg(0)
	} else if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "mm2go validate: unexpected arguments %v\n", fs.Args())
		return exitUsage
	}
	if file == "" {
		_, _ = fmt.Fprintln(stderr, "mm2go validate: -c FILE is required")
		return exitUsage
	}
	log, _, err := newLogger(stderr, "warn", logConsole, prometheus.NewRegistry())
	if err != nil {
		return exitUsage
	}
	cfg, ok := loadConfig(file, log, stderr)
	if !ok {
		return exitUsage
	}
	_, _ = fmt.Fprint(stdout, cfg.Dump())
	printCertificates(stdout, cfg)
	if !connect {
		return exitOK
	}
	failed := 0
	for _, f := range cfg.EnabledFlows() {
		if err := listFlow(context.Background(), f, stdout); err != nil {
			failed++
			_, _ = fmt.Fprintf(stderr, "mm2go validate: flow %s: %v\n", f.Name(), err)
		}
	}
	if failed > 0 {
		_, _ = fmt.Fprintf(stderr, "mm2go validate: %d of %d enabled flows could not connect to or list their clusters (errors above)\n",
			failed, len(cfg.EnabledFlows()))
		return exitFailure
	}
	return exitOK
}

// listFlow checks the connectivity of every client of f (preflight), then
// writes to w the source topics f would replicate now: partition count,
// remote topic and whether the remote topic exists on the target. Errors
// name the cluster; no record is read or written.
func listFlow(ctx context.Context, f *config.Flow, w io.Writer) error {
	if err := preflight(ctx, f); err != nil {
		return err
	}
	src, err := kgo.NewClient(f.Client(config.RoleSourceAdmin).Opts()...)
	if err != nil {
		return fmt.Errorf("create admin client for %s: %w", f.Source, err)
	}
	defer src.Close()
	dst, err := kgo.NewClient(f.Client(config.RoleTargetAdmin).Opts()...)
	if err != nil {
		return fmt.Errorf("create admin client for %s: %w", f.Target, err)
	}
	defer dst.Close()
	ctx, cancel := context.WithTimeout(ctx, f.AdminTimeout)
	defer cancel()

	sel, err := selectorFor(f)
	if err != nil {
		return fmt.Errorf("compile topic filter: %w", err)
	}
	pol := sel.Policy
	listed, err := kadm.NewClient(src).ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("list topics on %s: %w", f.Source, err)
	}
	var topics, remotes []string
	for name, d := range listed {
		if d.IsInternal || d.Err != nil || !sel.ShouldReplicate(name) {
			continue
		}
		topics = append(topics, name)
		remotes = append(remotes, pol.FormatRemoteTopic(f.Source, name))
	}
	sort.Strings(topics)
	var onTarget kadm.TopicDetails
	if len(remotes) > 0 {
		if onTarget, err = kadm.NewClient(dst).ListTopics(ctx, remotes...); err != nil {
			return fmt.Errorf("list topics on %s: %w", f.Target, err)
		}
	}

	partitions := 0
	for _, t := range topics {
		partitions += len(listed[t].Partitions)
	}
	_, _ = fmt.Fprintf(w, "\nflow %s replicates %d topic(s), %s, from %s to %s\n",
		f.Name(), len(topics), partitionCount(partitions), f.Source, f.Target)
	if len(topics) == 0 {
		_, _ = fmt.Fprintf(w, "  no topic of %s that this user may describe matches topics = %s (topics.exclude = %s)\n",
			f.Source, strings.Join(f.Topics, ", "), strings.Join(f.TopicsExclude, ", "))
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "  TOPIC\tPARTITIONS\tREMOTE TOPIC\tON "+strings.ToUpper(f.Target))
	for _, t := range topics {
		remote := pol.FormatRemoteTopic(f.Source, t)
		_, _ = fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", t, len(listed[t].Partitions), remote, remoteState(onTarget[remote], len(listed[t].Partitions)))
	}
	return tw.Flush()
}

// remoteState describes a remote topic as the target's metadata shows it.
func remoteState(d kadm.TopicDetail, sourcePartitions int) string {
	switch {
	case d.Err == nil && d.Topic != "":
		s := "exists, " + partitionCount(len(d.Partitions))
		if len(d.Partitions) < sourcePartitions {
			s += fmt.Sprintf(" (grown to %d when mm2go starts)", sourcePartitions)
		}
		return s
	case d.Err == nil, errors.Is(d.Err, kerr.UnknownTopicOrPartition):
		return "missing: created when mm2go starts"
	case errors.Is(d.Err, kerr.TopicAuthorizationFailed):
		return "not visible: no Describe ACL for it"
	default:
		return fmt.Sprintf("unknown: %v", d.Err)
	}
}

// partitionCount is "1 partition" or "n partitions".
func partitionCount(n int) string {
	if n == 1 {
		return "1 partition"
	}
	return fmt.Sprintf("%d partitions", n)
}

// printCertificates lists, per flow, the certificates its clients present
// or trust, with their expiry.
func printCertificates(w io.Writer, cfg *config.Config) {
	for _, f := range cfg.Flows {
		certs := f.Certificates()
		if len(certs) == 0 {
			continue
		}
		_, _ = fmt.Fprintf(w, "\ncertificates of flow %s\n", f.Name())
		for _, c := range certs {
			left := time.Until(c.NotAfter).Round(time.Hour)
			_, _ = fmt.Fprintf(w, "  %s %s %q expires %s (in %s) from %s\n",
				c.Cluster, c.Kind, c.Subject, c.NotAfter.UTC().Format(time.RFC3339), left, c.Key)
		}
	}
}
