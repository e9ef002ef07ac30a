package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/loop"
	"github.com/mm2go/mm2go/internal/offsetmap"
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
		follow  bool
		every   time.Duration
		listen  string
	)
	ff.register(fs, time.Hour)
	fs.BoolVar(&follow, "follow", false, "verify continuously: every --interval, what was copied since the last round, exporting mm2go_verify_* metrics; until SIGINT or SIGTERM")
	fs.DurationVar(&every, "interval", 30*time.Second, "with --follow, the pause between rounds")
	fs.StringVar(&listen, "web.listen-address", "", "with --follow, address to serve /metrics on (empty: none)")
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

	of.verifyOptions(&o)
	if follow {
		return followVerify(o, of.flow.Name(), ff.timeout, every, listen, stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ff.timeout)
	defer cancel()
	rep, err := verify.Run(ctx, o)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "mm2go: verify %s: %v\n", of.flow.Name(), err)
		return exitFailure
	}
	if asJSON {
		_ = writeJSON(stdout, struct {
			Flow    string  `json:"flow"`
			OK      bool    `json:"ok"`
			Seconds float64 `json:"elapsed_seconds"`
			*verify.Report
		}{of.flow.Name(), rep.OK(), rep.Elapsed.Seconds(), rep})
	} else {
		printVerify(stdout, of.flow.Name(), rep)
	}
	if !rep.OK() {
		return exitFailure
	}
	return exitOK
}

// followVerify runs verification rounds every interval until SIGINT or
// SIGTERM, each partition starting where the previous round ended, and
// exports their results as metrics. Findings are logged with their offsets;
// the exit code is 0 after a signal, 1 when /metrics cannot be served.
func followVerify(o verify.Options, flow string, timeout, interval time.Duration, listen string, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	reg := prometheus.NewRegistry()
	log, _, err := newLogger(stderr, "info", logConsole, reg)
	if err != nil {
		return exitUsage
	}
	log = log.With(zap.String("flow", flow))
	m := verify.NewMetrics(reg)
	if listen != "" {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "mm2go: --web.listen-address %s: %v\n", listen, err)
			return exitFailure
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("serving /metrics", zap.String("address", ln.Addr().String()))
	}
	o.From = make(map[offsetmap.TP]int64)
	for {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		rep, err := verify.Run(rctx, o)
		cancel()
		if ctx.Err() != nil {
			return exitOK
		}
		if err != nil {
			log.Warn("verification round failed; tried again at the next", zap.Error(err))
			m.Round(flow, nil)
		} else {
			m.Round(flow, rep)
			for _, p := range rep.Partitions {
				logFindings(log, &p)
				if p.Error == "" {
					o.From[offsetmap.TP{Topic: p.Topic, Partition: p.Partition}] = p.SourceTo
				}
			}
			log.Info("verified", zap.Int64("matched", rep.Totals.Matched), zap.Bool("ok", rep.OK()), zap.Duration("took", rep.Elapsed))
		}
		if !loop.Sleep(ctx, interval) {
			return exitOK
		}
	}
}

// logFindings logs what a round found in a partition, one warning per kind.
func logFindings(log *zap.Logger, p *verify.Partition) {
	where := []zap.Field{zap.String("topic", p.Topic), zap.Int32("partition", p.Partition), zap.String("target_topic", p.RemoteTopic)}
	if p.Error != "" {
		log.Warn("partition not verified to the end; again at the next round", append(where, zap.String("error", p.Error))...)
	}
	for _, f := range []struct {
		what string
		f    verify.Finding
	}{{"records missing on the target", p.Missing}, {"records copied twice", p.Duplicated},
		{"copies differ from their source records (" + p.DifferingFields + ")", p.Differing},
		{"target records copy no source record", p.Extra}} {
		if f.f.Count > 0 {
			log.Warn(f.what, append(where, zap.Int64("count", f.f.Count), zap.Int64("first_source_offset", f.f.FirstSource), zap.Int64("first_target_offset", f.f.FirstTarget))...)
		}
	}
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

// verifyOptions fills in what verify needs of the flow: its names and
// clients (2 MiB fetches: the peak memory stays low).
func (of *offlineFlow) verifyOptions(o *verify.Options) {
	o.Source, o.Policy, o.Replicated = of.flow.Source, of.sel.Policy, of.sel.ShouldReplicate
	o.SourceAdmin, o.TargetAdmin, o.MapReader = of.srcAdm, of.tgtAdm, of.reader
	readerOpts := append(itopic.ReaderOpts(), kgo.FetchMaxPartitionBytes(2<<20), kgo.FetchMaxBytes(2<<20))
	o.NewSourceReader = func() (*kgo.Client, error) { return of.newClient(config.RoleSourceConsumer, readerOpts...) }
	o.NewTargetReader = func() (*kgo.Client, error) { return of.newClient(config.RoleTargetConsumer, readerOpts...) }
}
