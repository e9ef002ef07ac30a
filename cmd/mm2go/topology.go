package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/policy"
)

// runTopology is `mm2go topology -c FILE`: for every cluster of the file it
// lists the topics and prints what MM2's MirrorClient (RemoteClusterUtils)
// reads from their names: the heartbeats and checkpoints topics, every
// upstream cluster whose heartbeats arrive, how many replication hops away
// it is, and how many remote topics come directly from it.
//
// It exits 0 when every cluster with bootstrap.servers answered, 1 when one
// did not (the others are still printed), 2 for bad flags or a bad file.
func runTopology(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mm2go topology", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		file    string
		timeout time.Duration
	)
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for each cluster's topic list")
	cfg, code := fileCommand(fs, args, &file, stderr)
	if cfg == nil {
		return code
	}
	for i, c := range cfg.Clusters {
		if i > 0 {
			_, _ = fmt.Fprintln(stdout)
		}
		client, p := topologyAccess(cfg, c.Alias)
		if client == nil {
			_, _ = fmt.Fprintf(stdout, "cluster %s: no bootstrap.servers; skipped\n", c.Alias)
			continue
		}
		topics, err := listTopicNames(client.Opts(), timeout)
		if err != nil {
			_, _ = fmt.Fprintf(stdout, "cluster %s (%s): unavailable\n", c.Alias, strings.Join(client.BootstrapServers, ","))
			_, _ = fmt.Fprintf(stderr, "mm2go topology: list topics of cluster %s: %v\n", c.Alias, err)
			code = exitFailure
			continue
		}
		printTopology(stdout, c.Alias, client.BootstrapServers, p, topics)
	}
	return code
}

// topologyAccess picks the admin client settings and replication policy used
// to read cluster alias. MM2's MirrorClient uses the cluster's own client
// settings and the file's replication.policy.* keys; mm2go takes both from a
// flow that touches the cluster, preferring an enabled flow into it (its
// target admin), then any flow into it, then a flow out of it (its source
// admin). The identity policy gets no source alias, as in MirrorClient, so
// only heartbeats topics have a source under it. It returns a nil client when
// the cluster has no bootstrap.servers.
func topologyAccess(cfg *config.Config, alias string) (*config.Client, policy.Policy) {
	var (
		best     *config.Client
		bestFlow *config.Flow
		bestRank = 3
	)
	for _, f := range cfg.Flows {
		role, rank := config.RoleSourceAdmin, 3
		switch {
		case f.Target == alias && f.Enabled:
			role, rank = config.RoleTargetAdmin, 0
		case f.Target == alias:
			role, rank = config.RoleTargetAdmin, 1
		case f.Source == alias:
			rank = 2
		}
		if c := f.Client(role); rank < bestRank && c != nil && len(c.BootstrapServers) > 0 {
			best, bestFlow, bestRank = c, f, rank
		}
	}
	if best == nil {
		return nil, policy.Policy{}
	}
	kind := policy.KindDefault
	if bestFlow.ReplicationPolicyClass == config.PolicyIdentity {
		kind = policy.KindIdentity
	}
	return best, policy.New(kind, bestFlow.ReplicationPolicySeparator, bestFlow.ReplicationPolicyInternalTopicSeparatorEnabled, "")
}

// listTopicNames connects with opts and returns the cluster's topic names
// without Kafka's internal topics, as the admin client's listTopics() that
// MirrorClient calls.
func listTopicNames(opts []kgo.Opt, timeout time.Duration) ([]string, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	td, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(td))
	for name, d := range td {
		if d.Err == nil {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// printTopology writes one cluster's section.
func printTopology(w io.Writer, alias string, bootstrap []string, p policy.Policy, topics []string) {
	_, _ = fmt.Fprintf(w, "cluster %s (%s): %d topics\n", alias, strings.Join(bootstrap, ","), len(topics))
	_, _ = fmt.Fprintf(w, "  heartbeats topics: %s\n", listOrNone(p.HeartbeatTopics(topics)))
	_, _ = fmt.Fprintf(w, "  checkpoints topics: %s\n", listOrNone(p.CheckpointTopics(topics)))
	up := p.UpstreamClusters(topics)
	if len(up) == 0 {
		_, _ = fmt.Fprintln(w, "  upstream clusters: none")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "  upstream\thops\tremote topics")
	for _, u := range up {
		_, _ = fmt.Fprintf(tw, "  %s\t%d\t%d\n", u, p.ReplicationHops(topics, u), len(p.RemoteTopicsFrom(topics, u)))
	}
	_ = tw.Flush()
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
