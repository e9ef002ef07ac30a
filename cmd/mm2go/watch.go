package main

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/mm2go/mm2go/replicator"
)

// A task taken from this instance stops its replicator. When it was lost
// with the flow's group session, because the target stopped answering say,
// no other instance may get it until the target answers again, and its lag
// would vanish from /metrics just when it grows. So the stopped replicator
// keeps its lag gauges moving (replicator.Watch) until the flow's group
// assigns tasks again: the task runs here again (its new run sets them) or
// elsewhere (the watch deletes them).

// grantEnded is the cause with which a task's workers are stopped when its
// grant ended (revoked or lost) in generation gen.
type grantEnded struct{ gen int32 }

func (grantEnded) Error() string { return "the task was taken from this instance" }

// errAssignedHere ends a watch because the task runs here again.
var errAssignedHere = errors.New("the task was assigned to this instance again")

// watches are the lag watches of a flow's stopped tasks.
type watches struct {
	mu      sync.Mutex
	gen     int32 // generation of the flow's group's last assignment here
	running map[int]*watch
	wg      sync.WaitGroup
}

type watch struct {
	cancel context.CancelCauseFunc
}

// start watches rep, stopped in generation gen, with adm, unless the group
// assigned tasks since (the assignment decided who reports the task).
func (w *watches) start(ctx context.Context, task int, gen int32, rep *replicator.Replicator, adm *kadm.Client) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if gen < w.gen || adm == nil {
		return
	}
	if w.running == nil {
		w.running = make(map[int]*watch)
	}
	if old := w.running[task]; old != nil {
		old.cancel(errAssignedHere)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	w.running[task] = &watch{cancel: cancel}
	w.wg.Go(func() {
		rep.Watch(wctx, adm, func() bool { return !errors.Is(context.Cause(wctx), errAssignedHere) })
	})
}

// assigned ends every watch: the group assigned tasks in generation gen,
// tasks here.
func (w *watches) assigned(gen int32, tasks []int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen = max(w.gen, gen)
	for task, x := range w.running {
		if slices.Contains(tasks, int32(task)) {
			x.cancel(errAssignedHere)
		} else {
			x.cancel(nil)
		}
		delete(w.running, task)
	}
}

// stopTask ends the watch of a task about to run here.
func (w *watches) stopTask(task int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if x := w.running[task]; x != nil {
		x.cancel(errAssignedHere)
		delete(w.running, task)
	}
}

// stopAll ends every watch, deleting their gauges, and waits for them.
func (w *watches) stopAll() {
	w.mu.Lock()
	for task, x := range w.running {
		x.cancel(nil)
		delete(w.running, task)
	}
	w.mu.Unlock()
	w.wg.Wait()
}
