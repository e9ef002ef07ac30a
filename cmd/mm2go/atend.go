package main

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/mm2go/mm2go/checkpoint"
	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/cutover"
	"github.com/mm2go/mm2go/internal/loop"
	"github.com/mm2go/mm2go/policy"
	"github.com/mm2go/mm2go/verify"
)

// stopAtEnd is --stop-at-end, a one-shot migration: it takes the end
// offsets of every flow's source topics when mm2go starts, waits until
// replication copied up to them, commits each idle group's final offsets,
// translated, into the target group (as `mm2go offsets apply`, local topics
// initialized), verifies every copied record, and returns the exit code: 0
// when every flow verified clean. The daemon is then stopped the usual way
// (drain, progress stored). Records written after the start are copied
// until the stop but are not waited for.
func stopAtEnd(ctx context.Context, flows []*config.Flow, log *zap.Logger) int {
	code := exitOK
	for _, f := range flows {
		flog := log.With(zap.String("flow", f.Name()))
		if err := migrateFlow(ctx, f, flog); err != nil {
			if ctx.Err() != nil {
				return exitFailure
			}
			flog.Error("one-shot migration failed", zap.Error(err))
			code = exitFailure
		}
	}
	return code
}

// migrateFlow runs --stop-at-end's steps for one flow.
func migrateFlow(ctx context.Context, f *config.Flow, log *zap.Logger) error {
	sel, err := selectorFor(f)
	if err != nil {
		return err
	}
	of, err := openOffline(f, sel, log)
	if err != nil {
		return err
	}
	defer of.close()
	readCommitted := f.SourceIsolationLevel == config.ReadCommitted

	// The ends at start: retried until the source answers.
	var ends map[checkpoint.TopicPartition]int64
	for ends == nil {
		topics, err := cutover.FlowTopics(ctx, of.srcAdm, sel)
		if err == nil {
			ends, err = cutover.Ends(ctx, of.srcAdm, topics, readCommitted)
		}
		if err != nil {
			log.Warn("--stop-at-end: list the source's topics and end offsets; retried", zap.Error(err))
			if !loop.Sleep(ctx, 5*time.Second) {
				return ctx.Err()
			}
		}
	}
	var total int64
	for _, e := range ends {
		total += e
	}
	log.Info("--stop-at-end: copying up to the source's end offsets at start", zap.Int("partitions", len(ends)), zap.Int64("end_offsets_sum", total))

	var said time.Time
	for {
		idx, _, err := loadIndex(ctx, of.reader, f, sel)
		if err == nil {
			behind, records := cutover.Behind(idx, ends)
			if len(behind) == 0 {
				break
			}
			if time.Since(said) >= 10*time.Second {
				said = time.Now()
				log.Info("--stop-at-end: waiting for replication", zap.Int("partitions", len(behind)), zap.Int64("offsets", records))
			}
		} else {
			log.Warn("--stop-at-end: read the offset map; retried", zap.Error(err))
		}
		if !loop.Sleep(ctx, time.Second) {
			return ctx.Err()
		}
	}
	log.Info("--stop-at-end: replication reached the end offsets of the start")
	if err := syncFinalOffsets(ctx, of, sel, log); err != nil {
		return err
	}

	o := verify.Options{}
	of.verifyOptions(&o)
	rep, err := verify.Run(ctx, o)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	t := rep.Totals
	fields := []zap.Field{zap.Int("partitions", len(rep.Partitions)), zap.Int64("matched", t.Matched),
		zap.Int64("missing", t.Missing.Count), zap.Int64("duplicated", t.Duplicated.Count), zap.Int64("differing", t.Differing.Count)}
	if !rep.OK() {
		return fmt.Errorf("verify found records missing, duplicated or changed (mm2go verify -c FILE --flow %s names their offsets): %d missing, %d duplicated, %d differing, %d extra",
			f.Name(), t.Missing.Count, t.Duplicated.Count, t.Differing.Count, t.Extra.Count)
	}
	log.Info("--stop-at-end: every copied record verified", fields...)
	return nil
}

// syncFinalOffsets commits the flow's groups' offsets, translated, into the
// idle target groups, as cutover's offsets step does once (never rewinding
// one). A group with members on the source or the target, or with an offset
// past what was copied, is logged and left alone.
func syncFinalOffsets(ctx context.Context, of *offlineFlow, sel policy.TopicSelector, log *zap.Logger) error {
	gf, err := policy.NewFilter(of.flow.Groups, of.flow.GroupsExclude)
	if err != nil {
		return err
	}
	groups, err := checkpoint.SelectGroups(ctx, of.srcAdm, gf, sel)
	if err != nil {
		return err
	}
	listed, err := of.srcAdm.ListGroups(ctx)
	if err != nil {
		return fmt.Errorf("list groups on the source: %w", err)
	}
	idx, _, err := loadIndex(ctx, of.reader, of.flow, sel)
	if err != nil {
		return err
	}
	o := cutover.Options{Flow: of.flow.Name(), Source: of.flow.Source, Sel: sel, SourceAdmin: of.srcAdm, TargetAdmin: of.tgtAdm}
	for _, g := range groups {
		if l, ok := listed[g]; ok && l.State != "Empty" && l.State != "Dead" {
			log.Warn("--stop-at-end: group has members on the source; its offsets are not synced", zap.String("group", g), zap.String("state", l.State))
			continue
		}
		res, why, err := cutover.SyncGroup(ctx, o, idx, g)
		if err != nil {
			return err
		}
		if why != "" {
			log.Warn("--stop-at-end: group offsets not synced", zap.String("group", g), zap.String("reason", why))
			continue
		}
		log.Info("--stop-at-end: group offsets on the target", zap.String("group", g), zap.String("how", res.How),
			zap.Int("offsets", len(res.Offsets)), zap.Int("local_topic_partitions_initialized", res.LocalInitialized))
	}
	return nil
}
