package fence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
)

// A Lease is this process's membership in the group that decides which
// mm2go instance runs which task of a flow: every instance started with the
// same file joins the flow's group on the target cluster, which assigns the
// partitions of the flow's task topic (one per task) to the live members.
// The member a partition is assigned to holds that task's grant and runs
// the task; when it leaves or its session times out the group gives the
// task to another member. A flow of one task has one holder and standbys.
//
// The group does the coordination (Kafka's classic group protocol through
// franz-go's consumer group, cooperative-sticky so that a member joining
// takes over only the tasks it must); the task topic is never written and
// its partitions are never read. A grant alone does not stop a paused
// holder that has not noticed yet that it lost it: the holder's writes are
// fenced with Acquire by whoever holds the task next.
type Lease struct {
	o   LeaseOptions
	cl  *kgo.Client
	log *zap.Logger

	// instanceFenced is closed when a newer member with the same instance
	// id took this one's place.
	instanceFenced chan struct{}
	fencedOnce     sync.Once

	mu      sync.Mutex
	pending []*Grant         // assigned, not yet taken by Wait
	held    map[int32]*Grant // taken by Wait, not yet released; by task
	inGroup bool             // an assignment (maybe empty) is in force

	grants chan struct{} // signalled when pending grows
}

// LeaseOptions configures Join.
type LeaseOptions struct {
	// Client creates the member's client (connection settings of the
	// target cluster) with the group options it is given.
	Client func(opts ...kgo.Opt) (*kgo.Client, error)
	// Group is the group's id, Topic the task topic (one partition per
	// task, which must exist).
	Group, Topic string
	// Session, Heartbeat and Rebalance are the group's session timeout,
	// heartbeat interval and rebalance timeout (Kafka Connect's defaults:
	// 10 s, 3 s and 60 s). A holder that is not heard of for Session loses
	// its tasks; a revocation waits up to Rebalance for the holder to stop.
	Session, Heartbeat, Rebalance time.Duration
	// InstanceID, when set, makes the member static (KIP-345): a process
	// restarted with the same id (after a crash) takes its old place at
	// once instead of waiting for the old session to time out, and a second
	// live process with the same id fences the first, which then stops
	// (Wait returns ErrInstanceFenced). Close leaves the group explicitly,
	// so a clean stop hands the tasks over at once.
	InstanceID string
	// OnAssigned, if set, is called after every assignment with its
	// generation and the tasks this member holds from then on.
	OnAssigned func(generation int32, tasks []int32)
	// OnRevoked, if set, is called after a revocation or loss with the
	// time the member took to stop the tasks it gave up.
	OnRevoked func(took time.Duration)
	Log       *zap.Logger
}

// ErrInstanceFenced is returned by Wait when a newer process joined with
// the same instance id: this one must stop.
var ErrInstanceFenced = errors.New("a newer process joined the group with the same instance id")

// A Grant is one tenure of one task, from its assignment to its revocation
// or loss.
type Grant struct {
	// Task is the task's number, the task topic's partition.
	Task int32
	// Generation is the group generation in which the task was assigned.
	Generation int32
	ctx        context.Context
	cancel     context.CancelFunc
	released   chan struct{}
	once       sync.Once
}

// Context ends when the grant is revoked or lost: the holder must stop
// writing and then call Release.
func (g *Grant) Context() context.Context { return g.ctx }

// Release tells the lease that the holder stopped writing; a revocation
// (another member may take the task) waits for it.
func (g *Grant) Release() {
	g.once.Do(func() {
		g.cancel()
		close(g.released)
	})
}

// Join starts the membership; it does not wait for the group.
func Join(o LeaseOptions) (*Lease, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	l := &Lease{o: o, log: o.Log, grants: make(chan struct{}, 1), instanceFenced: make(chan struct{}),
		held: make(map[int32]*Grant)}
	opts := []kgo.Opt{kgo.WithHooks(manageErrors(func(err error) {
		if errors.Is(err, kerr.FencedInstanceID) {
			l.fencedOnce.Do(func() { close(l.instanceFenced) })
		}
	}))}
	if o.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(o.InstanceID))
	}
	cl, err := o.Client(append(opts,
		kgo.ConsumerGroup(o.Group),
		kgo.ConsumeTopics(o.Topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(o.Session),
		kgo.HeartbeatInterval(o.Heartbeat),
		kgo.RebalanceTimeout(o.Rebalance),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
			_, gen := cl.GroupMetadata()
			l.assigned(gen, assigned[o.Topic])
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
			if len(revoked[o.Topic]) > 0 {
				l.revoked(ctx, revoked[o.Topic], o.Rebalance, "revoked", true)
			}
		}),
		kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
			l.mu.Lock()
			l.inGroup = false
			l.mu.Unlock()
			if len(lost[o.Topic]) > 0 {
				// Someone else may hold them already: no point in waiting.
				l.revoked(ctx, lost[o.Topic], 0, "lost", false)
			}
		}),
	)...)
	if err != nil {
		return nil, fmt.Errorf("join group %s: %w", o.Group, err)
	}
	l.cl = cl
	return l, nil
}

// assigned records an assignment: tasks are the partitions newly assigned
// (a cooperative assignment names only what it adds).
func (l *Lease) assigned(gen int32, tasks []int32) {
	l.mu.Lock()
	l.inGroup = true
	for _, task := range tasks {
		ctx, cancel := context.WithCancel(context.Background())
		g := &Grant{Task: task, Generation: gen, ctx: ctx, cancel: cancel, released: make(chan struct{})}
		l.pending = append(l.pending, g)
		l.log.Info("task assigned; this instance runs it", zap.Int32("task", task), zap.Int32("generation", gen))
	}
	all := l.tasksLocked()
	l.mu.Unlock()
	if len(tasks) > 0 {
		select {
		case l.grants <- struct{}{}:
		default:
		}
	}
	if l.o.OnAssigned != nil {
		l.o.OnAssigned(gen, all)
	}
}

// revoked ends the grants of tasks; with wait it waits (up to limit) until
// their holders released them, so that the next holders start only after
// this one stopped writing.
func (l *Lease) revoked(ctx context.Context, tasks []int32, limit time.Duration, how string, wait bool) {
	start := time.Now()
	gone := make(map[int32]bool, len(tasks))
	for _, t := range tasks {
		gone[t] = true
	}
	var stopping []*Grant
	l.mu.Lock()
	keep := l.pending[:0]
	for _, g := range l.pending {
		if gone[g.Task] {
			g.Release()
		} else {
			keep = append(keep, g)
		}
	}
	l.pending = keep
	for t, g := range l.held {
		if gone[t] {
			delete(l.held, t)
			stopping = append(stopping, g)
		}
	}
	l.mu.Unlock()
	defer func() {
		if l.o.OnRevoked != nil {
			l.o.OnRevoked(time.Since(start))
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for _, g := range stopping {
		select {
		case <-g.released:
			continue // the holder had stopped already (a clean stop, then Close)
		default:
		}
		g.cancel()
		l.log.Info("task "+how+"; stopping it", zap.Int32("task", g.Task), zap.Int32("generation", g.Generation))
		if !wait {
			continue
		}
		select {
		case <-g.released:
		case <-wctx.Done():
			l.log.Warn("the task did not stop within the rebalance timeout; its next holder fences its writes",
				zap.Int32("task", g.Task), zap.Duration("rebalance_timeout", limit))
		}
	}
}

// tasksLocked returns the tasks held or pending, sorted.
func (l *Lease) tasksLocked() []int32 {
	var out []int32
	for t := range l.held {
		out = append(out, t)
	}
	for _, g := range l.pending {
		out = append(out, g.Task)
	}
	slices.Sort(out)
	return out
}

// Wait blocks until this member is assigned a task it has not been given
// yet (or ctx ends) and returns its grant; each assignment of a task is
// returned once.
func (l *Lease) Wait(ctx context.Context) (*Grant, error) {
	for {
		l.mu.Lock()
		for len(l.pending) > 0 {
			g := l.pending[0]
			l.pending = l.pending[1:]
			if g.ctx.Err() == nil {
				l.held[g.Task] = g
				l.mu.Unlock()
				return g, nil
			}
		}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-l.instanceFenced:
			return nil, fmt.Errorf("group %s, instance id %s: %w", l.o.Group, l.o.InstanceID, ErrInstanceFenced)
		case <-l.grants:
		}
	}
}

// Standing reports whether this member is in the group without a task:
// other members run the flow's tasks (or are about to be given them).
func (l *Lease) Standing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inGroup && len(l.pending) == 0 && len(l.held) == 0
}

// Fenced is closed when a newer process joined with the same instance id.
func (l *Lease) Fenced() <-chan struct{} { return l.instanceFenced }

// manageErrors is a kgo hook that passes group management errors to fn.
type manageErrors func(error)

func (h manageErrors) OnGroupManageError(err error) { h(err) }

// Close leaves the group. The grants end first, and Close waits (up to
// the rebalance timeout) until they are released.
func (l *Lease) Close() {
	member, _ := l.cl.GroupMetadata()
	l.cl.Close()
	if l.o.InstanceID != "" && member != "" {
		l.leaveStatic(member)
	}
	l.mu.Lock()
	pending := l.pending
	l.pending = nil
	l.mu.Unlock()
	for _, g := range pending {
		g.Release()
	}
}

// leaveStatic removes this static member from the group (a static member's
// client does not leave when it closes), so that the group gives the lease
// to another member now rather than after the session timeout. The request
// names the member id too: if a newer process took the instance id, the
// group refuses it (FENCED_INSTANCE_ID) instead of removing the newer one.
func (l *Lease) leaveStatic(member string) {
	cl, err := l.o.Client()
	if err != nil {
		l.log.Warn("leave the group", zap.Error(err))
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = l.o.Group
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID, m.InstanceID = member, &l.o.InstanceID
	m.Reason = kmsg.StringPtr("mm2go stopping")
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
		for _, mr := range resp.Members {
			if err == nil {
				err = kerr.ErrorForCode(mr.ErrorCode)
			}
		}
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) && !errors.Is(err, kerr.FencedInstanceID) {
		l.log.Warn("leave the group; another instance takes the lease once this one's session times out",
			zap.String("group", l.o.Group), zap.Duration("session_timeout", l.o.Session), zap.Error(err))
	}
}
