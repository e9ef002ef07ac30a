// Package fence makes a writer of target partitions exclusive with Kafka's
// own producer fencing, so that an instance that lost the right to copy (a
// second process started by mistake and then stopped, a process paused past
// its session, a zombie of an earlier run) cannot get a single record
// acknowledged afterwards.
//
// The mechanism is a transactional id's epoch. Acquire initializes the
// producer of a transactional id (the broker bumps its epoch), then opens a
// transaction over every partition the writer will write and aborts it: the
// transaction coordinator writes an abort marker with the new epoch into
// each of those partitions. From that marker on, every partition refuses
// batches of the same producer id with an older epoch
// (INVALID_PRODUCER_EPOCH). The writer then writes plain idempotent batches
// with the returned producer id and epoch: no transaction per batch, so the
// copy path costs what it cost before; only each acquisition costs one
// marker (one offset) per partition.
//
// Records the old writer got acknowledged before the marker are in the
// log before it, where the new writer's reconciliation finds them: the
// caller acquires first and reads the target's tail after.
//
// What it needs from the cluster: WRITE and DESCRIBE on the transactional
// id, and the transaction state log (transaction.state.log.replication.factor
// brokers). What it does not cover: a transactional id the coordinator
// expired (transactional.id.expiration.ms, 7 days by default, counted from
// the last transaction operation) gets a new producer id, which older epochs
// of the old id do not fence; Renew keeps an id alive.
package fence

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/mm2go/mm2go/internal/loop"
)

// Producer is a producer id and epoch for idempotent writes.
type Producer struct {
	ID    int64
	Epoch int16
}

// Fenced reports whether err says that a newer epoch of the writer's
// transactional id took over: the writer lost its partitions and must not
// initialize again on its own (that would fence the new owner back).
func Fenced(err error) bool {
	return errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.ProducerFenced)
}

// retryFirst and retryLongest bound the pause between attempts while the
// coordinator is busy (CONCURRENT_TRANSACTIONS: the markers of the previous
// step are still being written, which takes milliseconds) or moving. Every
// start and every newly fenced partition waits for markers once, so the
// first pause is short.
const (
	retryFirst   = 10 * time.Millisecond
	retryLongest = 100 * time.Millisecond
)

// Acquire fences every older producer of txnID out of the partitions parts
// (topic -> partitions) and returns the producer id and epoch to write them
// with. It returns when the abort markers are in every partition; it retries
// what the coordinator answers as retriable until ctx ends. txnTimeout is
// the transaction timeout registered with the id.
func Acquire(ctx context.Context, cl *kgo.Client, txnID string, txnTimeout time.Duration, parts map[string][]int32) (Producer, error) {
	p, err := initProducer(ctx, cl, txnID, txnTimeout)
	if err != nil {
		return Producer{}, err
	}
	if len(parts) == 0 {
		return p, nil
	}
	if err := addPartitions(ctx, cl, txnID, p, parts); err != nil {
		return Producer{}, err
	}
	if err := abort(ctx, cl, txnID, p); err != nil {
		return Producer{}, err
	}
	// The abort returns once the coordinator logged it; its markers are
	// written after. Initializing again waits for them
	// (CONCURRENT_TRANSACTIONS until done) and gives the epoch to write with.
	return initProducer(ctx, cl, txnID, txnTimeout)
}

// Renew is a transaction operation on txnID that keeps the coordinator from
// expiring it, for a writer that holds it for days; it bumps the epoch, so
// the writer continues with the returned producer (sequence numbers start
// at zero again). Call it only with no batch in flight.
func Renew(ctx context.Context, cl *kgo.Client, txnID string, txnTimeout time.Duration, cur Producer) (Producer, error) {
	return initWith(ctx, cl, &txnID, txnTimeout, cur)
}

// Idempotent returns a new producer id without a transactional id: an
// idempotent producer that fences nobody and that nobody can fence.
func Idempotent(ctx context.Context, cl *kgo.Client) (Producer, error) {
	return initWith(ctx, cl, nil, time.Minute, Producer{ID: -1, Epoch: -1})
}

func initProducer(ctx context.Context, cl *kgo.Client, txnID string, txnTimeout time.Duration) (Producer, error) {
	return initWith(ctx, cl, &txnID, txnTimeout, Producer{ID: -1, Epoch: -1})
}

func initWith(ctx context.Context, cl *kgo.Client, txnID *string, txnTimeout time.Duration, cur Producer) (Producer, error) {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = txnID
	req.TransactionTimeoutMillis = int32(txnTimeout.Milliseconds())
	req.ProducerID, req.ProducerEpoch = cur.ID, cur.Epoch
	what := "initialize an idempotent producer"
	if txnID != nil {
		what = "initialize the producer of transactional id " + *txnID
	}
	var p Producer
	err := retry(ctx, what, func() error {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		p = Producer{ID: resp.ProducerID, Epoch: resp.ProducerEpoch}
		return kerr.ErrorForCode(resp.ErrorCode)
	})
	return p, err
}

func addPartitions(ctx context.Context, cl *kgo.Client, txnID string, p Producer, parts map[string][]int32) error {
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch = txnID, p.ID, p.Epoch
	topics := make([]string, 0, len(parts))
	for t := range parts {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		rt := kmsg.NewAddPartitionsToTxnRequestTopic()
		rt.Topic, rt.Partitions = t, parts[t]
		req.Topics = append(req.Topics, rt)
	}
	return retry(ctx, "add the fenced partitions to transactional id "+txnID, func() error {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		for _, t := range resp.Topics {
			for _, pr := range t.Partitions {
				if err := kerr.ErrorForCode(pr.ErrorCode); err != nil {
					// OPERATION_NOT_ATTEMPTED marks the partitions that
					// were fine while another failed; the failed one names
					// the cause.
					if errors.Is(err, kerr.OperationNotAttempted) {
						continue
					}
					return fmt.Errorf("%s[%d]: %w", t.Topic, pr.Partition, err)
				}
			}
		}
		return nil
	})
}

func abort(ctx context.Context, cl *kgo.Client, txnID string, p Producer) error {
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = txnID, p.ID, p.Epoch, false
	return retry(ctx, "abort the fencing transaction of "+txnID, func() error {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	})
}

// unreachableFor bounds how long retry asks again after network errors:
// long enough to get past the seeds that are down to one that is up (kgo
// sends each coordinator lookup to the next seed and returns a dead seed's
// dial error as is), short enough that a cluster that is down fails the
// caller with that error instead of holding it silently.
const unreachableFor = 10 * time.Second

// retry runs fn until it succeeds, fails with an error that is not
// retriable, or ctx ends. Network errors (a seed that refuses connections)
// are retried for unreachableFor.
func retry(ctx context.Context, what string, fn func() error) error {
	backoff := loop.Backoff{Min: retryFirst, Max: retryLongest}
	start := time.Now()
	for {
		err := fn()
		if err == nil {
			return nil
		}
		_, network := errors.AsType[*net.OpError](err)
		network = network && ctx.Err() == nil && time.Since(start) < unreachableFor
		if !network && !errors.Is(err, kerr.ConcurrentTransactions) && !kerr.IsRetriable(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !loop.Sleep(ctx, backoff.Next()) {
			return fmt.Errorf("%s: %w (last error: %w)", what, ctx.Err(), err)
		}
	}
}
