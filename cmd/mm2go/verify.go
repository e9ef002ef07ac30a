package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/policy"
	"github.com/mm2go/mm2go/verify"
)

// runVerify is `mm2go verify`: it compares every record of the flow's
// copied partitions with its copy and exits 0 only when each one is
// there once, unchanged, or explained.
func runVerify(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mm2go verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		ff      flowFlags
		topics  string
		since   string
		asJSON  bool
		workers int
	)
	ff.register(fs, time.Hour)
	fs.StringVar(&topics, "topics", "", "only source topics matching these regular expressions (comma-separated, Java syntax, as the file's topics)")
	fs.StringVar(&since, "since", "", "start each partition at its first record at or after this time: RFC 3339 (2026-12-02T10:00:00Z) or a duration back from now (90m)")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.IntVar(&workers, "workers", 4, "partitions read at once")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	o := verify.Options{Workers: workers}
	if topics != "" {
		f, err := policy.NewFilter(strings.Split(topics, ","), nil)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "mm2go: --topics: %v\n", err)
			return exitUsage
		}
		o.Topics = f
	}
	if since != "" {
		t, err := parseSince(since, time.Now())
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "mm2go: --since: %v\n", err)
			return exitUsage
		}
		o.Since = t
	}
	of, code := ff.open(stderr)
	if of == nil {
		return code
	}
	defer of.close()
	ctx, cancel := context.WithTimeout(context.Background(), ff.timeout)
	defer cancel()

	o.Source, o.Policy, o.Replicated = of.flow.Source, of.sel.Policy, of.sel.ShouldReplicate
	o.SourceAdmin, o.TargetAdmin, o.MapReader = of.srcAdm, of.tgtAdm, of.reader
	readerOpts := append(itopic.ReaderOpts(), kgo.FetchMaxPartitionBytes(2<<20), kgo.FetchMaxBytes(2<<20))
	o.NewSourceReader = func() (*kgo.Client, error) { return of.newClient(config.RoleSourceConsumer, readerOpts...) }
	o.NewTargetReader = func() (*kgo.Client, error) { return of.newClient(config.RoleTargetConsumer, readerOpts...) }
	rep, err := verify.Run(ctx, o)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "mm2go: verify %s: %v\n", of.flow.Name(), err)
		return exitFailure
	}
	if asJSON {
		_ = writeJSON(stdout, struct {
			Flow string `json:"flow"`
			OK   bool   `json:"ok"`
			*verify.Report
		}{of.flow.Name(), rep.OK(), rep})
	} else {
		printVerify(stdout, of.flow.Name(), rep)
	}
	if !rep.OK() {
		return exitFailure
	}
	return exitOK
}

// parseSince reads --since: a time in RFC 3339 or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("%q: a duration back from now must be positive", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-12-02T10:00:00Z) nor a duration (90m)", s)
	}
	return t, nil
}

// printVerify prints a report: a summary, a row per partition, then each
// finding with its first offsets.
func printVerify(w io.Writer, flow string, rep *verify.Report) {
	t := &rep.Totals
	topics := make(map[string]bool)
	for _, p := range rep.Partitions {
		topics[p.Topic] = true
	}
	_, _ = fmt.Fprintf(w, "verify %s: %s of %s in %.1f s: %d records matched; missing %d, duplicated %d, differing %d, extra %d\n",
		flow, plural(len(rep.Partitions), "partition"), plural(len(topics), "topic"), rep.Elapsed.Seconds(), t.Matched, t.Missing.Count, t.Duplicated.Count, t.Differing.Count, t.Extra.Count)
	if e := explained(t); e != "" {
		_, _ = fmt.Fprintf(w, "explained, not errors: %s\n", e)
	}
	if rep.Malformed > 0 {
		_, _ = fmt.Fprintf(w, "the offset map has %d records that do not decode (ignored)\n", rep.Malformed)
	}
	if len(rep.Partitions) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(tw, "TOPIC\tPARTITION\tREMOTE\tSOURCE OFFSETS\tTARGET OFFSETS\tMATCHED\tMISSING\tDUPLICATED\tDIFFERING\tEXTRA")
		for _, p := range rep.Partitions {
			_, _ = fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", p.Topic, p.Partition, p.RemoteTopic,
				offsetRange(p.SourceFrom, p.SourceTo), offsetRange(p.TargetFrom, p.TargetTo), p.Matched, p.Missing.Count, p.Duplicated.Count, p.Differing.Count, p.Extra.Count)
		}
		_ = tw.Flush()
	}
	for _, p := range rep.Partitions {
		where := fmt.Sprintf("%s[%d] -> %s[%d]", p.Topic, p.Partition, p.RemoteTopic, p.Partition)
		if p.Error != "" {
			_, _ = fmt.Fprintf(w, "%s: not verified to the end: %s\n", where, p.Error)
		}
		if n := p.Missing.Count; n > 0 {
			_, _ = fmt.Fprintf(w, "%s: %d missing on the target, the first at source offset %d\n", where, n, p.Missing.FirstSource)
		}
		if n := p.Duplicated.Count; n > 0 {
			_, _ = fmt.Fprintf(w, "%s: %d copied twice, the first a second copy of source offset %d at target offset %d\n", where, n, p.Duplicated.FirstSource, p.Duplicated.FirstTarget)
		}
		if n := p.Differing.Count; n > 0 {
			_, _ = fmt.Fprintf(w, "%s: %d copies differ (%s), the first of source offset %d at target offset %d\n", where, n, p.DifferingFields, p.Differing.FirstSource, p.Differing.FirstTarget)
		}
		if n := p.Extra.Count; n > 0 {
			_, _ = fmt.Fprintf(w, "%s: %d target records copy no source record, the first at target offset %d\n", where, n, p.Extra.FirstTarget)
		}
	}
	if rep.OK() {
		_, _ = fmt.Fprintln(w, "OK: every record in the verified ranges is on the target once and unchanged, or explained")
	} else {
		_, _ = fmt.Fprintln(w, "NOT OK: see the findings above")
	}
}

// offsetRange shows the offsets [from, to) as "from-last", "-" when empty.
func offsetRange(from, to int64) string {
	if to <= from {
		return "-"
	}
	return fmt.Sprintf("%d-%d", from, to-1)
}

// plural is "1 partition", "2 partitions".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// explained lists the non-zero explained counts of t.
func explained(t *verify.Partition) string {
	var parts []string
	for _, e := range []struct {
		n    int64
		what string
	}{
		{t.RemovedFromSource, "copies of records compacted away on the source since"},
		{t.TargetRetention, "copies deleted by the target's retention"},
		{t.TargetCompacted, "copies compacted away on the target"},
		{t.BeforeMap, "source offsets before mm2go's offset map (copied before it, or by another replicator)"},
		{t.NotCopied, "source offsets not copied yet"},
		{t.AfterMap, "copies after the offset map's end (recorded at the next flush)"},
	} {
		if e.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", e.n, e.what))
		}
	}
	return strings.Join(parts, "; ")
}
