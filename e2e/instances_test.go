package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mm2go/mm2go/internal/ktest"
)

// TestIntegrationInstances runs three mm2go processes with the same file,
// started at the same moment (as a second and third host, or instances
// started by mistake), on 4 topics x 12 partitions with a steady producer,
// the flow split into three tasks (tasks.max = 3): the flow's group spreads
// them, one per process. A process running a task is repeatedly killed with
// SIGKILL (and started again with its instance id, which gives it a task
// back), and, in the batches copy mode (the default), paused with SIGSTOP
// past its session timeout and resumed: its tasks move to the others each
// time, and the paused one must not write after it lost them (its producer
// epochs are fenced). At the end the target holds exactly the source's records per
// partition, none missing, none twice.
//
// The pause events run only in the batches mode, whose default
// mm2go.copy.fencing = epoch fences, and in exactly-once flows, whose
// transactional producer is fenced by the next holder's: the record copy
// mode's franz-go producer has no epoch the next holder could fence.
func TestIntegrationInstances(t *testing.T) {
	e := newEnv(t)
	const partitions, tasks = 12, 3
	var topics []string
	for i := range 4 {
		tp := e.topic(fmt.Sprintf("inst%d", i))
		topics = append(topics, tp)
		e.createTopic(tp, partitions, nil)
	}
	// The batches mode (the default) and exactly-once flows fence; the
	// record mode cannot.
	fencing := fenced() || exactlyOnce()
	cfg := e.config("tasks.max = "+strconv.Itoa(tasks), fencingLine())

	sent := make(map[string]map[int32][]rec)
	var mu sync.Mutex
	stop := make(chan struct{})
	produced := make(chan error, 1)
	go func() {
		seq := 0
		for {
			select {
			case <-stop:
				produced <- nil
				return
			case <-time.After(50 * time.Millisecond):
			}
			batch, err := produce(e.srcCl, topics, partitions, 240, &seq)
			if err != nil {
				produced <- err
				return
			}
			mu.Lock()
			merge(sent, batch)
			mu.Unlock()
		}
	}()

	ids := []string{"host-a", "host-b", "host-c"}
	procs := make(map[string]*proc)
	start := func(id string) {
		procs[id] = e.start("-c", cfg, "--web.listen-address", "", "--instance-id", id)
	}
	for _, id := range ids {
		start(id)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for id, p := range procs {
				out := p.out.String()
				t.Logf("%s's log (last 6000 bytes):\n%s", id, out[max(0, len(out)-6000):])
			}
		}
	})

	adm := e.dstAdm
	owners := func() map[int32]string { return taskOwners(t, adm, e.src, tasks) }
	runsTask := func(o map[int32]string, id string) bool {
		for _, owner := range o {
			if owner == id {
				return true
			}
		}
		return false
	}
	// Records on the target: with fencing, every start of a task puts an
	// abort marker into each of its remote partitions, so the end offsets
	// are more than the records.
	copied := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var n int64
		for _, tp := range topics {
			c, err := ktest.Records(ctx, adm, e.remote(tp))
			if err != nil {
				return 0
			}
			n += c
		}
		return n
	}
	// copying waits until records beyond n reach the target.
	copying := func(n int64, what string) {
		eventually(t, time.Minute, what, func() bool { return copied() > n+1000 })
	}

	// The group spreads the tasks: one per process.
	var o map[int32]string
	eventually(t, time.Minute, "every process running a task", func() bool {
		o = owners()
		return o != nil && runsTask(o, ids[0]) && runsTask(o, ids[1]) && runsTask(o, ids[2])
	})
	copying(0, "records copied")
	t.Logf("tasks spread over the %d processes: %v", len(ids), o)

	// Each event takes the session timeout (10 s) and more: the test
	// command runs 4 (half of them pauses; 2 kills in the record mode's
	// pass); the acceptance run of docs/instances.md sets
	// MM2GO_INSTANCE_EVENTS=10.
	events := 2
	if fencing {
		events = 4
	}
	if s := os.Getenv("MM2GO_INSTANCE_EVENTS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "MM2GO_INSTANCE_EVENTS")
		events = n
	}
	var moves, flows, backs []time.Duration
	lostSeen := map[*proc]int{} // per process: a restarted one logs anew
	for i := range events {
		// The victim: the process running task i mod 3 (task 0 also runs
		// the checkpoints and the group-offset sync).
		var h string
		eventually(t, time.Minute, "every task running after the group settled", func() bool {
			o = owners()
			h = o[int32(i%tasks)]
			return o != nil
		})
		pause := fencing && i%2 == 1
		at := time.Now()
		if pause {
			require.NoError(t, procs[h].cmd.Process.Signal(syscall.SIGSTOP))
		} else {
			procs[h].stop(t, syscall.SIGKILL, 10*time.Second)
		}
		eventually(t, time.Minute, "the tasks of "+h+" running elsewhere", func() bool {
			o = owners()
			return o != nil && !runsTask(o, h)
		})
		moved := time.Since(at)
		n := copied()
		copying(n, "records copied after the tasks of "+h+" moved")
		flowing := time.Since(at)
		moves, flows = append(moves, moved), append(flows, flowing)
		how := "SIGKILL"
		if pause {
			how = "SIGSTOP"
			// The paused process resumes after it lost its tasks: whatever
			// it had in flight must be refused.
			require.NoError(t, procs[h].cmd.Process.Signal(syscall.SIGCONT))
			p := procs[h]
			eventually(t, 30*time.Second, h+" noticing that it lost its tasks", func() bool {
				return strings.Count(p.out.String(), "task lost; stopping it") > lostSeen[p]
			})
			lostSeen[p] = strings.Count(p.out.String(), "task lost; stopping it")
		} else {
			start(h)
		}
		// Back in the group, the process gets a task again: the group
		// rebalances one task to it (and moves no other).
		back := time.Now()
		eventually(t, time.Minute, h+" running a task again", func() bool {
			o = owners()
			return o != nil && runsTask(o, h)
		})
		backs = append(backs, time.Since(back))
		t.Logf("event %d: %s of %s; its tasks ran elsewhere %s later, records flowed %s later; back in the group it ran a task %s later (%v)",
			i+1, how, h, moved.Round(100*time.Millisecond), flowing.Round(100*time.Millisecond),
			backs[len(backs)-1].Round(100*time.Millisecond), o)
	}

	close(stop)
	require.NoError(t, <-produced)
	mu.Lock()
	want := total(sent)
	mu.Unlock()
	eventually(t, 2*time.Minute, "all records on the target", func() bool { return copied() >= want })

	// Exactly the source per partition: no record missing, none twice, in
	// order; then the count once more, in case a late write came after.
	for _, tp := range topics {
		got := readAll(t, targetSeeds, e.remote(tp))
		for p := range int32(partitions) {
			ws := sent[tp][p]
			gs := got[p]
			require.Lenf(t, gs, len(ws), "records of %s[%d]", e.remote(tp), p)
			for i := range ws {
				require.Equalf(t, string(ws[i].Value), string(gs[i].Value), "%s[%d] record %d", e.remote(tp), p, i)
			}
		}
	}
	refused := 0
	for id, p := range procs {
		refused += strings.Count(p.out.String(), "took over with a newer epoch")
		// Tasks moving (a revocation while a task starts included) are
		// no failures that restart the flow.
		require.NotContains(t, p.out.String(), "flow failed; restarting", "log of %s", id)
	}
	t.Logf("writes of a resumed holder refused by the fence: %d times", refused)
	slowest := func(ds []time.Duration) time.Duration { return slices.Max(ds).Round(100 * time.Millisecond) }
	t.Logf("%d records, %d events, 0 missing, 0 duplicated; tasks moved within %s, records flowed again within %s, a returning process ran a task within %s",
		want, events, slowest(moves), slowest(flows), slowest(backs))
	// The group's session timeout is 10 s: the tasks must move within 5 s
	// more.
	require.LessOrEqual(t, slices.Max(moves), 15*time.Second, "tasks moved later than the session timeout plus 5 s")
}
