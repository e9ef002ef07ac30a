package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mm2go/mm2go/checkpoint"
	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/cutover"
	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/verify"
)

const cutoverUsage = `usage: mm2go cutover -c FILE [--flow A->B] --group G [--group G2 ...] [--fence [--fence-principal P ...] [--fence-keep-open]]
                     [--state FILE] [--report FILE] [--dry-run] [--json]
       mm2go cutover --unfence -c FILE [--flow A->B] --state FILE`

// runCutover is `mm2go cutover`: the switch of a flow's producers and
// consumers from its source to its target, step by step, resumable with its
// state file (package cutover).
func runCutover(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mm2go cutover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = fmt.Fprintln(stderr, cutoverUsage)
		fs.PrintDefaults()
	}
	var (
		ff          flowFlags
		groups      multiFlag
		principals  multiFlag
		fence       bool
		keepOpen    bool
		unfence     bool
		dryRun      bool
		asJSON      bool
		statePath   string
		reportPath  string
		quiet       time.Duration
		verifySince time.Duration
	)
	ff.register(fs, 30*time.Minute)
	fs.Var(&groups, "group", "consumer group to switch (repeatable)")
	fs.BoolVar(&fence, "fence", false, "fence the source's producers of the flow's topics with DENY WRITE ACLs (needs an ACL authorizer on the source)")
	fs.Var(&principals, "fence-principal", "with --fence, the principal denied (repeatable; default User:*, every principal that is not a super user)")
	fs.BoolVar(&keepOpen, "fence-keep-open", false, "with --fence, on topics no ACL names (a source with allow.everyone.if.no.acl.found=true), also allow every other operation to User:*: the DENY ACL alone would take reading from every principal that is not a super user")
	fs.BoolVar(&unfence, "unfence", false, "remove exactly the ACLs the cutover of --state created, and exit")
	fs.BoolVar(&dryRun, "dry-run", false, "run the preflight and say what the other steps would do, changing nothing")
	fs.BoolVar(&asJSON, "json", false, "print the final report as JSON (the state file's content)")
	fs.StringVar(&statePath, "state", "", "the cutover's state file: started again with it, a cutover continues where it stopped (default mm2go-cutover.SOURCE-TARGET.json)")
	fs.StringVar(&reportPath, "report", "", "also write the final report (text) to this file")
	fs.DurationVar(&quiet, "quiet", 2*time.Second, "how long the source's end offsets must stay unchanged before they count as final")
	fs.DurationVar(&verifySince, "verify-since", time.Hour, "verify the records written since this long before the cutover started (0: no verify step)")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "mm2go cutover: unexpected argument %q\n%s\n", fs.Arg(0), cutoverUsage)
		return exitUsage
	}
	if (len(principals) > 0 || keepOpen) && !fence {
		_, _ = fmt.Fprintln(stderr, "mm2go cutover: --fence-principal and --fence-keep-open need --fence")
		return exitUsage
	}
	if !unfence && len(groups) == 0 {
		_, _ = fmt.Fprintf(stderr, "mm2go cutover: --group is required\n%s\n", cutoverUsage)
		return exitUsage
	}
	of, code := ff.open(stderr)
	if of == nil {
		return code
	}
	defer of.close()
	if statePath == "" {
		statePath = "mm2go-cutover." + of.flow.Source + "-" + of.flow.Target + ".json"
	}
	st, err := cutover.LoadState(statePath)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "mm2go cutover: %v\n", err)
		return exitFailure
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, ff.timeout)
	defer cancel()
	save := func(s *cutover.State) error { return s.Save(statePath) }

	if unfence {
		if st == nil {
			_, _ = fmt.Fprintf(stderr, "mm2go cutover --unfence: no state file %s\n", statePath)
			return exitFailure
		}
		n, err := cutover.Unfence(ctx, of.srcAdm, st, time.Now())
		if err == nil {
			err = save(st)
		}
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "mm2go cutover --unfence: %v\n", err)
			return exitFailure
		}
		_, _ = fmt.Fprintf(stdout, "removed %d DENY WRITE ACLs of the cutover of %s from the source (%s on %d topics)\n",
			n, st.Flow, strings.Join(st.Fence.Principals, ", "), len(st.Fence.Topics))
		return exitOK
	}

	// The reverse flow's offset map lives on this flow's source: a
	// failback translates the groups' offsets on the target's records back.
	backReader, err := of.newClient(config.RoleSourceConsumer, itopic.ReaderOpts()...)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "mm2go cutover: %v\n", err)
		return exitFailure
	}
	defer backReader.Close()
	var lastWarn string
	o := cutover.Options{
		Flow: of.flow.Name(), Source: of.flow.Source, Sel: of.sel, Groups: groups,
		Fence: fence, Principals: principals, KeepOpen: keepOpen, ReadCommitted: of.flow.SourceIsolationLevel == config.ReadCommitted,
		Quiet: quiet, VerifySince: verifySince, DryRun: dryRun,
		SourceAdmin: of.srcAdm, TargetAdmin: of.tgtAdm, SourceClient: of.srcCl,
		LoadIndex: func(ctx context.Context) (*checkpoint.Index, error) {
			idx, warn, err := loadIndex(ctx, of.reader, of.flow, of.sel)
			if warn != nil && warn.Error() != lastWarn {
				lastWarn = warn.Error()
				_, _ = fmt.Fprintf(stderr, "mm2go cutover: %v\n", warn)
			}
			return idx, err
		},
		Back: func(ctx context.Context) (*checkpoint.Index, error) {
			return checkpoint.LoadIndex(ctx, backReader, offsetmap.Topic(of.flow.Target), 0)
		},
		Verify: func(ctx context.Context, since time.Time) (*verify.Report, error) {
			vo := verify.Options{Since: since}
			of.verifyOptions(&vo)
			return verify.Run(ctx, vo)
		},
		Out:  stdout,
		Save: save,
	}
	if dryRun {
		_, _ = fmt.Fprintf(stdout, "dry run of the cutover of %s (nothing is changed, no state is written)\n", o.Flow)
	} else {
		_, _ = fmt.Fprintf(stdout, "cutover of %s, state in %s\n", o.Flow, statePath)
	}
	st, err = cutover.Run(ctx, o, st)
	if errors.Is(err, cutover.ErrStateMismatch) {
		// The state is another cutover's: its report is not this one's.
		_, _ = fmt.Fprintf(stderr, "mm2go cutover: %v: use another --state\n", err)
		return exitUsage
	}
	if dryRun {
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "mm2go cutover: %v\n", err)
			return exitFailure
		}
		return exitOK
	}
	if st != nil {
		if asJSON {
			_ = writeJSON(stdout, st)
		} else {
			_, _ = fmt.Fprintln(stdout)
			_ = cutover.WriteReport(stdout, st)
		}
		if reportPath != "" {
			if werr := writeReportFile(reportPath, st); werr != nil {
				_, _ = fmt.Fprintf(stderr, "mm2go cutover: --report: %v\n", werr)
			}
		}
	}
	switch {
	case err != nil && ctx.Err() != nil:
		_, _ = fmt.Fprintf(stderr, "mm2go cutover: stopped: %v; run it again with --state %s to continue\n", err, statePath)
		return exitFailure
	case err != nil:
		_, _ = fmt.Fprintf(stderr, "mm2go cutover: %v\n", err)
		return exitFailure
	}
	return exitOK
}

func writeReportFile(path string, st *cutover.State) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := cutover.WriteReport(f, st); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
