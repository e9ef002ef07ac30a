package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
)

// A Lease is this process's membership in the group that decides which
// mm2go instance runs a flow: every instance started with the same file
// joins the flow's group on the target cluster, which assigns the single
// partition of the flow's lease topic to one member; that member holds the
// lease and runs the flow, the others stand by, and when the holder leaves
// or its session times out the group gives the lease to another member.
//
// The group does the coordination (Kafka's classic group protocol through
// franz-go's consumer group, cooperative-sticky so that a member joining
// does not take the lease away); the lease topic is never written and its
// partition is never read. A lease alone does not stop a paused holder that
// has not noticed yet that it lost the lease: the holder's writes are
// fenced with Acquire by whoever holds the lease next.
type Lease struct {
	o   LeaseOptions
	cl  *kgo.Client
	log *zap.Logger

	// instanceFenced is closed when a newer member with the same instance
	// id took this one's place.
	instanceFenced chan struct{}
	fencedOnce     sync.Once

	mu      sync.Mutex
	pending *Grant // assigned, not yet taken by Wait
	held    *Grant // taken by Wait, not yet released
	inGroup bool   // an assignment (maybe empty) is in force

	grants chan struct{} // signalled when pending is set
}

// LeaseOptions configures Join.
type LeaseOptions struct {
	// Client creates the member's client (connection settings of the
	// target cluster) with the group options it is given.
	Client func(opts ...kgo.Opt) (*kgo.Client, error)
	// Group is the group's id, Topic the lease topic (one partition, which
	// must exist).
	Group, Topic string
	// Session, Heartbeat and Rebalance are the group's session timeout,
	// heartbeat interval and rebalance timeout (Kafka Connect's defaults:
	// 10 s, 3 s and 60 s). A holder that is not heard of for Session loses
	// the lease; a revocation waits up to Rebalance for the holder to stop.
	Session, Heartbeat, Rebalance time.Duration
	// InstanceID, when set, makes the member static (KIP-345): a process
	// restarted with the same id (after a crash) takes its old place at
	// once instead of waiting for the old session to time out, and a second
	// live process with the same id fences the first, which then stops
	// (Wait returns ErrInstanceFenced). Close leaves the group explicitly,
	// so a clean stop hands the lease over at once.
	InstanceID string
	Log        *zap.Logger
}

// ErrInstanceFenced is returned by Wait when a newer process joined with
// the same instance id: this one must stop.
var ErrInstanceFenced = errors.New("a newer process joined the group with the same instance id")

// A Grant is one tenure of the lease, from an assignment to its revocation
// or loss.
type Grant struct {
	// Generation is the group generation in which the lease was assigned.
	Generation int32
	ctx        context.Context
	cancel     context.CancelFunc
	released   chan struct{}
	once       sync.Once
}

// Context ends when the lease is revoked or lost: the holder must stop
// writing and then call Release.
func (g *Grant) Context() context.Context { return g.ctx }

// Release tells the lease that the holder stopped writing; a revocation
// (another member may take the lease) waits for it.
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
	l := &Lease{o: o, log: o.Log, grants: make(chan struct{}, 1), instanceFenced: make(chan struct{})}
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
			l.mu.Lock()
			l.inGroup = true
			l.mu.Unlock()
			if len(assigned[o.Topic]) > 0 {
				_, gen := cl.GroupMetadata()
				l.assigned(gen)
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
			if len(revoked[o.Topic]) > 0 {
				l.revoked(ctx, o.Rebalance, "revoked", true)
			}
		}),
		kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
			l.mu.Lock()
			l.inGroup = false
			l.mu.Unlock()
			if len(lost[o.Topic]) > 0 {
				// Someone else may hold it already: no point in waiting.
				l.revoked(ctx, 0, "lost", false)
			}
		}),
	)...)
	if err != nil {
		return nil, fmt.Errorf("join group %s: %w", o.Group, err)
	}
	l.cl = cl
	return l, nil
}

func (l *Lease) assigned(gen int32) {
	ctx, cancel := context.WithCancel(context.Background())
	g := &Grant{Generation: gen, ctx: ctx, cancel: cancel, released: make(chan struct{})}
	l.mu.Lock()
	if l.pending != nil {
		l.pending.Release()
	}
	l.pending = g
	l.mu.Unlock()
	l.log.Info("holding the lease; this instance runs the flow", zap.Int32("generation", gen))
	select {
	case l.grants <- struct{}{}:
	default:
	}
}

// revoked ends the current grant; with wait it waits (up to limit) until
// the holder released it, so that the next holder starts only after this
// one stopped writing.
func (l *Lease) revoked(ctx context.Context, limit time.Duration, how string, wait bool) {
	l.mu.Lock()
	pending, held := l.pending, l.held
	l.pending, l.held = nil, nil
	l.mu.Unlock()
	if pending != nil {
		pending.Release()
	}
	if held == nil {
		return
	}
	select {
	case <-held.released:
		return // the holder had stopped already (a clean stop, then Close)
	default:
	}
	held.cancel()
	l.log.Info("lease "+how+"; stopping the flow and standing by", zap.Int32("generation", held.Generation))
	if !wait {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	select {
	case <-held.released:
	case <-wctx.Done():
		l.log.Warn("the flow did not stop within the rebalance timeout; the next holder fences its writes",
			zap.Duration("rebalance_timeout", limit))
	}
}

// Wait blocks until this member holds the lease (or ctx ends) and returns
// the grant; each assignment is returned once.
func (l *Lease) Wait(ctx context.Context) (*Grant, error) {
	for {
		l.mu.Lock()
		g := l.pending
		if g != nil && g.ctx.Err() == nil {
			l.pending, l.held = nil, g
			l.mu.Unlock()
			return g, nil
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

// Standing reports whether this member is in the group without holding the
// lease: another member holds it (or is about to be given it).
func (l *Lease) Standing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inGroup && l.pending == nil && l.held == nil
}

// Fenced is closed when a newer process joined with the same instance id.
func (l *Lease) Fenced() <-chan struct{} { return l.instanceFenced }

// manageErrors is a kgo hook that passes group management errors to fn.
type manageErrors func(error)

func (h manageErrors) OnGroupManageError(err error) { h(err) }

// Close leaves the group. The holder's grant ends first, and Close waits
// (up to the rebalance timeout) until it is released.
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
	if pending != nil {
		pending.Release()
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
