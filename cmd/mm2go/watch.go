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

// watches are the lag watches of a flow's stopped tasks, from open to
// close (the flow's supervision).
type watches struct {
	mu      sync.Mutex
	life    context.Context // open's: every watch ends with it
	gen     int32           // generation of the flow's group's last assignment here
	running map[int]context.CancelCauseFunc
	wg      sync.WaitGroup
}

// open makes the watches live under ctx; close ends them.
func (w *watches) open(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.life = ctx
}

// start watches rep, stopped in generation gen, with adm, unless the group
// assigned tasks since (the assignment decided who reports the task).
func (w *watches) start(task int, gen int32, rep *replicator.Replicator, adm *kadm.Client) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if gen < w.gen || adm == nil || w.life == nil {
		return
	}
	w.stopLocked(task, errAssignedHere)
	if w.running == nil {
		w.running = make(map[int]context.CancelCauseFunc)
	}
	wctx, cancel := context.WithCancelCause(w.life)
	w.running[task] = cancel
	w.wg.Go(func() {
		rep.Watch(wctx, adm, func() bool { return !errors.Is(context.Cause(wctx), errAssignedHere) })
	})
}

// assigned ends every watch: the group assigned tasks in generation gen,
// tasks here (their new runs report them; the others run elsewhere, and
// their watches delete their gauges).
func (w *watches) assigned(gen int32, tasks []int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen = max(w.gen, gen)
	for task := range w.running {
		var cause error
		if slices.Contains(tasks, int32(task)) {
			cause = errAssignedHere
		}
		w.stopLocked(task, cause)
	}
}

// stopTask ends the watch of a task about to run here.
func (w *watches) stopTask(task int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopLocked(task, errAssignedHere)
}

// stopLocked ends task's watch, if any, with cause (errAssignedHere keeps
// its gauges; nil deletes them).
func (w *watches) stopLocked(task int, cause error) {
	if cancel := w.running[task]; cancel != nil {
		cancel(cause)
		delete(w.running, task)
	}
}

// close ends every watch, deleting their gauges, and waits for them.
func (w *watches) close() {
	w.mu.Lock()
	for task := range w.running {
		w.stopLocked(task, nil)
	}
	w.life = nil
	w.mu.Unlock()
	w.wg.Wait()
}
