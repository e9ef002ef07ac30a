package replicator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/internal/loop"
	"github.com/mm2go/mm2go/internal/metric"
)

// fetchLoop fetches the partitions that are copying and hands what it got to
// the send goroutine. Each source leader has one Fetch request out, two
// while it is far (see far) and its partitions behind: then its
// partitions are fetched in two halves of about equal backlog (halve), each
// asked again as soon as its response arrived (unless it has little left
// and the other much: see holdBelow), so that one half's request crosses
// the link while the other's response is on its way back, and on two
// connections (fw.lanes):
// a connection carries at most its socket buffers' bytes per round trip
// (the broker's send buffer: Kafka's socket.send.buffer.bytes, 100 KiB by
// default, 1.25 MB/s at 80 ms; the kernel's limit where it is -1), and the
// broker answers a connection's requests one at a time. In the benchmark's
// 80 ms link (32 MiB send buffers) one connection carried about 200 MB/s
// of 25 MB responses, two 300-350 MB/s. A response is taken as soon as it
// arrives and its partitions asked again, so a leader with nothing new (its
// request waits fetch.max.wait.ms) does not hold back the others.
//
// With mm2go.fetch.overlap.enabled, a far leader whose partitions are caught
// up has two requests for all of them out, each sent half a cycle after the
// other (overlapping; a cycle is the time a request with data takes, the
// slower lane's, at least the round trip: see slowest): a record written
// at the source then waits at most half a cycle, not a whole one, for a
// request to reach the broker. Both responses carry it; the later one's
// copy is dropped (take: batches before the partition's next offset), which
// is what the lower latency costs on the link. The two requests go on two
// connections (fw.lanes), each with one request out: a connection with a
// response always on its way never goes idle, and a source broker whose
// kernel uses BBR congestion control then cuts its window to four packets
// for 200 ms or more every 10 s (BBR's PROBE_RTT, which an idle restart
// skips): a stall of 300-500 ms each time in the benchmark's 80 ms link,
// where one connection was used for both.
//
// Both requests ask each partition at its next offset, so while one
// connection stalls (BBR's probe still hits each of the two, about every
// 10 s), the other's responses carry the same records. Asking the second
// where the first would end instead (guessed from how fast the source's
// end moved) carried a quarter fewer bytes in the benchmark (1.4-1.6 bytes
// across per byte, against 1.9-2.1), but then a stalled request held
// back every record after it, the other's response lying past a gap:
// latency maxima of 260-340 ms in three of sixteen runs at 80 ms.
func (fw *forwarder) fetchLoop(ctx context.Context, work chan<- fwdWork, failed <-chan struct{}) error {
	r := fw.r
	idle := r.o.Flow.ConsumerPollTimeout
	if idle <= 0 || idle > 100*time.Millisecond {
		idle = 100 * time.Millisecond
	}
	st := &fetchState{
		results:  make(chan fetchResult),
		outParts: map[int32]int{},
		behind:   map[int32]bool{},
		fetching: map[*partition]int{},
		sentAt:   map[int32]time.Time{},
		cycle:    map[int32][2]time.Duration{},
		lanesOut: map[int32][]int{},
		ahead:    map[*partition]int64{},
	}
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	defer func() {
		for range st.pending {
			<-st.results // every request ends with ctx
		}
	}()
	for {
		r.retryStalled()
		if err := ctx.Err(); err != nil {
			return err
		}
		st.wake = time.Time{}
		fw.issue(ctx, st, nil)
		if st.pending == 0 {
			loop.Sleep(ctx, idle)
			continue
		}
		var woken <-chan time.Time
		if !st.wake.IsZero() {
			wake.Reset(time.Until(st.wake))
			woken = wake.C
		}
		var res fetchResult
		select {
		case res = <-st.results:
		case <-woken:
			continue // an overlapping request is due
		case <-failed:
			return nil // run returns the send error
		case <-ctx.Done():
			return ctx.Err()
		}
		st.pending--
		st.lanesOut[res.leader][res.lane]--
		wake.Stop()
		st.outParts[res.leader] -= len(res.parts)
		for _, p := range res.parts {
			if st.fetching[p]--; st.fetching[p] <= 0 {
				delete(st.fetching, p)
			}
		}
		if res.err == nil && res.carried() {
			st.took(res.leader, time.Since(res.sent))
		}
		if res.err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fw.srcStale.Store(true)
			r.m.error(r.flow, metric.Reason(res.err, reasonFetch))
			r.log.Warn("fetch from source; retried", zap.Int32("broker", res.leader), zap.Error(res.err))
			loop.Sleep(ctx, idle)
			continue
		}
		// Ask again before taking the response: the next one crosses the
		// link meanwhile.
		fw.predict(res, st.ahead)
		fw.issue(ctx, st, res.parts)
		clear(st.ahead)
		w := make(fwdWork)
		fw.takeResponse(ctx, res, w)
		st.behind[res.leader] = slices.ContainsFunc(res.parts, func(p *partition) bool { return p.next < p.end.Load() })
		if r.throttle != nil {
			n := 0
			for _, bs := range w {
				for _, b := range bs {
					n += b.size
				}
			}
			r.throttled(ctx, n) // before the batches go: the send may recycle them
		}
		if len(w) == 0 {
			if fw.troubled {
				fw.troubled = false
				loop.Sleep(ctx, idle)
			}
			continue
		}
		select {
		case work <- w:
		case <-failed:
			fw.drop(w)
			return nil
		case <-ctx.Done():
			fw.drop(w)
			return ctx.Err()
		}
	}
}

// fetchState is the fetch loop's record of its requests out.
type fetchState struct {
	results  chan fetchResult
	pending  int                        // requests out
	outParts map[int32]int              // partitions in them
	behind   map[int32]bool             // the leader's last response left partitions behind
	fetching map[*partition]int         // requests out that ask for the partition
	sentAt   map[int32]time.Time        // when the leader's last request went out
	cycle    map[int32][2]time.Duration // how long the leader's last two requests with data took
	lanesOut map[int32][]int            // requests out per leader and lane (fw.lanes)
	ahead    map[*partition]int64       // offsets predicted from a response being taken (predict)
	wake     time.Time                  // when an overlapping request is due (zero: none)
}

// issue sends a Fetch request to every leader of copying partitions that
// are in no request out: one per leader, or two halves for a far leader
// whose partitions are behind (see fetchLoop). A far leader whose
// partitions are caught up, under mm2go.fetch.overlap.enabled, gets a second
// request for those in one request out, half a cycle (see fetchLoop) after
// the first (st.wake, when that is still to come). Partitions of taking (a
// response not taken yet) are asked for only at the offset predicted for
// them, and not at all without one (an error is handled first).
func (fw *forwarder) issue(ctx context.Context, st *fetchState, taking []*partition) {
	r := fw.r
	var parts []*partition
	wait := map[*partition]bool{}
	for _, p := range taking {
		if _, predicted := st.ahead[p]; !predicted {
			wait[p] = true
		}
	}
	r.eachPartition(func(p *partition) {
		if !wait[p] && !p.paused && !p.failed.Load() && !p.removed.Load() && st.fetching[p] < 2 {
			parts = append(parts, p)
		}
	})
	if len(parts) == 0 {
		return
	}
	by, err := fw.sourceLeaders(ctx, parts)
	if err != nil && ctx.Err() == nil {
		r.m.error(r.flow, metric.Reason(err, reasonFetch))
		r.log.Warn("source metadata; retried", zap.Error(err))
	}
	now := time.Now()
	for leader, ps := range by {
		rtt, far := fw.far(ctx, leader)
		halves := far && st.behind[leader]
		overlap := far && !st.behind[leader] && r.o.Flow.FetchOverlap && len(fw.lanes) > 1
		var busy int64 // what the leader's partitions in a request out have left
		if !overlap {
			free := ps[:0]
			for _, p := range ps {
				if st.fetching[p] > 0 {
					busy += left(p, st.ahead)
				} else {
					free = append(free, p)
				}
			}
			ps = free
		}
		most := 1
		if halves || overlap {
			most = 2
		}
		out := st.out(leader)
		if len(ps) == 0 || out >= most {
			continue // asked at the leader's next request
		}
		if halves && out > 0 && backlog(ps, st.ahead)*holdBelow < busy {
			// This half has little left and the other much: asked again
			// with it once it is back, split anew (halve), instead of
			// the other half's connection carrying the rest alone.
			continue
		}
		if overlap && out > 0 {
			if due := st.sentAt[leader].Add(max(rtt, st.slowest(leader)) / 2); now.Before(due) {
				if st.wake.IsZero() || due.Before(st.wake) {
					st.wake = due
				}
				continue
			}
		}
		groups := [][]*partition{ps}
		if out == 0 && halves && len(ps) > 1 {
			groups = halve(ps, st.ahead)
		}
		st.sentAt[leader] = now
		share := st.outParts[leader] + len(ps)
		for _, g := range groups {
			st.pending++
			st.outParts[leader] += len(g)
			for _, p := range g {
				st.fetching[p]++
			}
			// The request is built here, not in its goroutine: it reads
			// fw.src and the partitions' next offsets.
			res := fetchResult{leader: leader, sent: now, lane: st.lane(leader, len(fw.lanes)), parts: g, share: share, names: map[[16]byte]string{}, at: map[*partition]int64{}}
			st.lanesOut[leader][res.lane]++
			go fw.fetchFrom(ctx, res, fw.fetchRequest(g, res, st.ahead), st.results)
		}
	}
}

// holdBelow: a far leader's half that comes back with less than
// 1/holdBelow of what the other half, still out, has left waits for it
// (see issue). Each half keeps its partitions while both are out, so
// without the wait the half that finishes first goes on asking for its
// caught-up partitions and the other ends the catch-up alone on its
// connection: the last 0.63 s of an 8.0 s copy at 80 ms in a benchmark
// run.
const holdBelow = 4

// askAt is the offset p's next request asks it at: its next offset, or the
// one predicted for it while a response is taken (predict).
func askAt(p *partition, ahead map[*partition]int64) int64 {
	if a, ok := ahead[p]; ok {
		return a
	}
	return p.next
}

// left is how many offsets p has left to fetch: from askAt to its end.
func left(p *partition, ahead map[*partition]int64) int64 {
	return max(p.end.Load()-askAt(p, ahead), 0)
}

// backlog is what ps have left to fetch.
func backlog(ps []*partition, ahead map[*partition]int64) int64 {
	var n int64
	for _, p := range ps {
		n += left(p, ahead)
	}
	return n
}

// halve splits ps (two or more) into two groups with about the same
// backlog, and partitions with nothing left spread evenly: the two
// requests of a far leader that is behind then take about equally long.
func halve(ps []*partition, ahead map[*partition]int64) [][]*partition {
	sorted := slices.Clone(ps)
	slices.SortStableFunc(sorted, func(a, b *partition) int { return cmp.Compare(left(b, ahead), left(a, ahead)) })
	var g [2][]*partition
	var sum [2]int64
	for _, p := range sorted {
		i := 0
		if sum[1] < sum[0] || sum[1] == sum[0] && len(g[1]) < len(g[0]) {
			i = 1
		}
		g[i] = append(g[i], p)
		sum[i] += left(p, ahead)
	}
	return g[:]
}

// slowest is the longer of the leader's last two requests with data (0:
// none yet). Overlapping requests alternate between the two lanes, so the
// slower lane sets the period at which they reach the broker: spaced by
// half of it, a record waits at most half for the next request. Spaced by
// half the cycle of whichever came back last, requests taking 86 ms on one
// lane and 104 ms on the other (the benchmark's 80 ms link) reached the
// broker 43 and 61 ms apart. The last two only: a lane's cycle from the
// catch-up must not space the requests once that lane is no longer used.
func (st *fetchState) slowest(leader int32) time.Duration {
	c := st.cycle[leader]
	return max(c[0], c[1])
}

// took records that a request to leader with data took d.
func (st *fetchState) took(leader int32, d time.Duration) {
	c := st.cycle[leader]
	st.cycle[leader] = [2]time.Duration{d, c[0]}
}

// out returns the number of requests out to leader.
func (st *fetchState) out(leader int32) int {
	n := 0
	for _, k := range st.lanesOut[leader] {
		n += k
	}
	return n
}

// lane returns the lane (of n) a new request to leader goes on: the first
// with no request out, else the first.
func (st *fetchState) lane(leader int32, n int) int {
	out := st.lanesOut[leader]
	if out == nil {
		out = make([]int, n)
		st.lanesOut[leader] = out
	}
	if i := slices.Index(out, 0); i >= 0 {
		return i
	}
	return 0
}

// loadMeta fills meta with the topics' IDs and leaders from cl. It is
// called when a leader is not known or did not take a request
// (NOT_LEADER_FOR_PARTITION, say), so kgo's cached metadata is taken only
// if it is younger than metaFresh: kgo would keep the old leaders until its
// metadata min age (5 s by default).
func loadMeta(ctx context.Context, cl *kgo.Client, meta map[string]topicMeta, topics []string) error {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := cl.RequestCachedMetadata(ctx, req, metaFresh)
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		tm := topicMeta{id: t.TopicID, leaders: make(map[int32]int32, len(t.Partitions))}
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 && p.Leader >= 0 {
				tm.leaders[p.Partition] = p.Leader
			}
		}
		meta[*t.Topic] = tm
	}
	return nil
}

// metaFresh is how old kgo's cached metadata may be for loadMeta: a
// partition without a leader asks at every fetch round, and at most this
// often a broker.
const metaFresh = 100 * time.Millisecond

// metaOf returns a listed topic's ID and its partitions' leaders.
func metaOf(t kadm.TopicDetail) topicMeta {
	tm := topicMeta{id: t.ID, leaders: make(map[int32]int32, len(t.Partitions))}
	for _, p := range t.Partitions {
		if p.Err == nil && p.Leader >= 0 {
			tm.leaders[p.Partition] = p.Leader
		}
	}
	return tm
}

// leaders groups parts by the leader of pick(p) in meta, reloading meta when
// it is stale or lacks one of them. Partitions without a known leader are
// left out.
func leaders(ctx context.Context, cl *kgo.Client, meta map[string]topicMeta, stale bool, parts []*partition, pick func(*partition) string) (map[int32][]*partition, error) {
	missing := stale
	for _, p := range parts {
		if _, ok := meta[pick(p)].leaders[p.partition]; !ok {
			missing = true
		}
	}
	if missing {
		var topics []string
		seen := map[string]bool{}
		for _, p := range parts {
			if t := pick(p); !seen[t] {
				seen[t] = true
				topics = append(topics, t)
			}
		}
		clear(meta)
		if err := loadMeta(ctx, cl, meta, topics); err != nil {
			return nil, err
		}
	}
	by := make(map[int32][]*partition)
	for _, p := range parts {
		if l, ok := meta[pick(p)].leaders[p.partition]; ok {
			by[l] = append(by[l], p)
		}
	}
	return by, nil
}

func sourceTopic(p *partition) string { return p.topic }
func remoteTopic(p *partition) string { return p.remote }

// sourceLeaders groups parts by source leader, leaving out partitions
// without a known leader and those of a topic that is not the incarnation
// being copied.
func (fw *forwarder) sourceLeaders(ctx context.Context, parts []*partition) (map[int32][]*partition, error) {
	r := fw.r
	fw.listedMu.Lock()
	maps.Copy(fw.src, fw.listed)
	fw.listed = nil
	fw.listedMu.Unlock()
	by, err := leaders(ctx, r.o.Source, fw.src, fw.srcStale.Swap(false), parts, sourceTopic)
	if err != nil {
		fw.srcStale.Store(true)
		return nil, err
	}
	for leader, ps := range by {
		// A topic whose ID is not the incarnation being copied was
		// deleted and recreated: it is not fetched, and the next refresh
		// stops copying it (recreate.go), as kgo's consumer, which keeps
		// fetching by the old ID, leaves it for the refresh to find.
		ps = slices.DeleteFunc(ps, func(p *partition) bool {
			id, known := r.inc.id(p.topic)
			return known && [16]byte(id) != fw.src[p.topic].id
		})
		if len(ps) == 0 {
			delete(by, leader)
		} else {
			by[leader] = ps
		}
	}
	if len(by) < len(parts) {
		for _, p := range parts {
			if _, ok := fw.src[p.topic].leaders[p.partition]; !ok {
				fw.srcStale.Store(true) // ask again for the leaderless
				break
			}
		}
	}
	return by, nil
}

// fetchResult is one Fetch request's outcome.
type fetchResult struct {
	leader int32
	lane   int       // the index in fw.lanes of the client that sent it
	sent   time.Time // when it was sent
	parts  []*partition
	names  map[[16]byte]string  // topic IDs of the request, for responses that name only IDs
	at     map[*partition]int64 // the offset each partition was fetched at
	resp   *kmsg.FetchResponse
	err    error
	share  int // partitions of the leader being fetched, this request's included
}

// carried reports whether res's response brought any record bytes.
func (res fetchResult) carried() bool {
	for _, rt := range res.resp.Topics {
		for _, rp := range rt.Partitions {
			if len(rp.RecordBatches) > 0 {
				return true
			}
		}
	}
	return false
}

// fetchFrom sends req to res.leader and reports on results.
func (fw *forwarder) fetchFrom(ctx context.Context, res fetchResult, req *kmsg.FetchRequest, results chan<- fetchResult) {
	resp, err := fw.lanes[res.lane].Broker(int(res.leader)).Request(ctx, req)
	if err == nil {
		res.resp = resp.(*kmsg.FetchResponse)
		err = kerr.ErrorForCode(res.resp.ErrorCode)
	}
	res.err = err
	results <- res
}

// fetchRequest builds the Fetch request for ps at their next offsets (or
// those ahead predicted), noting topic IDs and offsets in res.
func (fw *forwarder) fetchRequest(ps []*partition, res fetchResult, ahead map[*partition]int64) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = fw.maxWait
	req.MinBytes = 1
	req.MaxBytes = fw.fetchMax
	if fw.isolation == kgo.ReadCommitted() {
		req.IsolationLevel = 1
	}
	req.SessionID, req.SessionEpoch = 0, -1
	idx := map[string]int{}
	for _, p := range ps {
		i, ok := idx[p.topic]
		if !ok {
			i = len(req.Topics)
			idx[p.topic] = i
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = p.topic, fw.src[p.topic].id
			res.names[rt.TopicID] = p.topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = p.partition
		at := askAt(p, ahead)
		rp.FetchOffset = at
		res.at[p] = at
		rp.CurrentLeaderEpoch = -1
		rp.LogStartOffset = -1
		rp.PartitionMaxBytes = fetchAsk(max(p.fetchSize, fw.partitionMax), p.cut, p.largest)
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	return req
}

// predict notes in ahead the offset each partition of res continues at
// once the response is taken: after the last whole batch in it at or past
// the partition's next offset, as take and reencode will set it (or the
// next offset, when it brought nothing). Partitions with an error, or
// batches of the old formats, are left out: they are asked again after the
// response is taken. A wrong guess costs one fetch: take drops a response
// fetched at another offset than the partition's next. It also notes the
// batch sizes the partition's next request is sized by (fetchAsk).
func (fw *forwarder) predict(res fetchResult, ahead map[*partition]int64) {
	res.current(func(p *partition, rp *kmsg.FetchResponseTopicPartition) {
		p.cut, p.largest = 0, 0
		if rp.ErrorCode != 0 {
			return
		}
		next := p.next
		in := rp.RecordBatches
		for {
			rb, rest, more := nextBatch(in)
			if !more {
				break
			}
			in = rest
			if rb.magic != 2 {
				return
			}
			p.largest = max(p.largest, int32(len(rb.b)))
			if rb.last() >= next {
				next = rb.last() + 1
			}
		}
		p.cut = cutBatch(in)
		ahead[p] = next
	})
}

// cutBatch returns the size of the batch whose start tail is, the end of a
// response that a partition's size limit cut off in the middle of a batch
// (the broker serves its log as it lies on disk, not whole batches); 0 when
// tail is empty or too short to tell.
func cutBatch(tail []byte) int32 {
	size := batchSize(tail)
	if size <= len(tail) || size > math.MaxInt32 {
		return 0
	}
	return int32(size)
}

// fetchAsk returns what a partition's next Fetch asks for, given limit,
// what it may ask for at most, and its last response's cut and largest
// batch (see partition.cut). The broker fills what was asked from its log
// byte for byte, so a response mostly ends in the middle of a batch, which
// is dropped and fetched again whole by the next request: with batches of
// half the limit and more (1 MB batches compressed to 0.53 MB, against
// max.partition.fetch.bytes' 1 MiB), that was nearly half of every
// response, fetched twice. So the next request asks for the cut batch and
// as many more as fit at the size of the largest batch seen, which ends the
// response at a batch's end while the batches that follow are no larger.
// After a response that ended at a batch's end, the next batch's size is
// unknown: as many of the largest as fit, and an eighth of one more for it
// being larger. A batch larger than that comes cut, and is asked for whole
// next time; or, when it would be all the partition's response held,
// nothing comes (the broker sends no part of a first batch), and the next
// request asks for limit. A cut batch larger than limit is asked for whole:
// the broker returns a batch larger than what was asked only for the first
// partition in a response with data, so the others would never get it.
func fetchAsk(limit, cut, largest int32) int32 {
	switch {
	case cut >= limit:
		return cut
	case cut > 0:
		b := max(largest, cut)
		return cut + (limit-cut)/b*b
	case largest > 0:
		slack := largest / 8
		if n := (limit - slack) / largest; n > 0 {
			return n*largest + slack
		}
	}
	return limit
}

// current calls fn for each partition of res's response that is still
// copying (not failed or gone) and was fetched at its next offset, or before
// it without an error (an overlapping request's, or a prediction that fell
// short): take and reencode skip what it holds before the next offset. An
// error answering an offset before the next one is stale: the log start it
// reports out of range, say, may lie below records already copied, which
// would be copied again. The partition's next request meets the error if
// it still holds.
func (res fetchResult) current(fn func(*partition, *kmsg.FetchResponseTopicPartition)) {
	find := make(map[tp]*partition, len(res.parts))
	for _, p := range res.parts {
		find[tp{p.topic, p.partition}] = p
	}
	for ti := range res.resp.Topics {
		rt := &res.resp.Topics[ti]
		topic := rt.Topic
		if topic == "" {
			topic = res.names[rt.TopicID]
		}
		for pi := range rt.Partitions {
			rp := &rt.Partitions[pi]
			if p := find[tp{topic, rp.Partition}]; p != nil && !p.failed.Load() && !p.removed.Load() &&
				(res.at[p] == p.next || res.at[p] < p.next && rp.ErrorCode == 0) {
				fn(p, rp)
			}
		}
	}
}

// takeResponse turns a Fetch response into batches to send, advancing each
// partition's next offset. Fetch goroutine only.
func (fw *forwarder) takeResponse(ctx context.Context, res fetchResult, w fwdWork) {
	_, far := fw.far(ctx, res.leader)
	res.current(func(p *partition, rp *kmsg.FetchResponseTopicPartition) {
		switch err := kerr.ErrorForCode(rp.ErrorCode); {
		case err == nil:
		case errors.Is(err, kerr.OffsetOutOfRange):
			fw.outOfRange(ctx, p)
			return
		case errors.Is(err, kerr.NotLeaderForPartition), errors.Is(err, kerr.FencedLeaderEpoch),
			errors.Is(err, kerr.UnknownLeaderEpoch), errors.Is(err, kerr.LeaderNotAvailable),
			errors.Is(err, kerr.ReplicaNotAvailable), errors.Is(err, kerr.KafkaStorageError),
			errors.Is(err, kerr.OffsetNotAvailable):
			fw.srcStale.Store(true)
			fw.troubled = true
			return
		default:
			fw.srcStale.Store(true)
			fw.fetchError(p, err)
			return
		}
		if end := endOf(rp.HighWatermark, rp.LastStableOffset); end > p.end.Load() {
			p.end.Store(end)
		}
		if bs := fw.take(p, rp, res.at[p]); len(bs) > 0 {
			w[p] = bs
		}
		fw.resize(p, len(rp.RecordBatches), far, p.next < p.end.Load(), res.share)
	})
}

// far reports leader's round trip and whether it is far away: at least
// mm2go.fetch.far.threshold.ms (15 by default; another region). What one
// Fetch per partition carries bounds a far broker's copy: its partitions get
// larger fetches (resize) and two requests in flight (fetchLoop). A near one
// (the same data centre: well under a millisecond) keeps
// max.partition.fetch.bytes, and so its memory bound. The round trip is
// measured once, in the background (see measure), usually while the flow
// starts (warm); until then it counts as near.
func (fw *forwarder) far(ctx context.Context, leader int32) (time.Duration, bool) {
	fw.rttMu.Lock()
	defer fw.rttMu.Unlock()
	rtt, ok := fw.rtt[leader]
	if !ok {
		fw.rtt[leader] = -1 // being measured
		go fw.measure(ctx, leader)
	}
	return rtt, rtt >= fw.farRTT
}

// measure notes broker's round trip for far: the shortest of five Metadata
// requests for no topics 20 ms apart (which the broker answers at once,
// unlike a Fetch that waits for data or carries megabytes; the shortest,
// because a busy broker or machine only adds to it: one of three on a
// loaded 2-core machine took 11 ms over loopback). A far broker's other
// connections (fw.lanes) are opened then, before requests need them. A
// broker that does not answer is measured again at far's next look.
func (fw *forwarder) measure(ctx context.Context, broker int32) {
	best := time.Duration(-1)
	for i := range 5 {
		if i > 0 && !loop.Sleep(ctx, 20*time.Millisecond) {
			break
		}
		t0 := time.Now()
		if _, err := fw.r.o.Source.Broker(int(broker)).Request(ctx, metadataNoTopics()); err != nil {
			break
		}
		if d := time.Since(t0); best < 0 || d < best {
			best = d
		}
	}
	fw.rttMu.Lock()
	defer fw.rttMu.Unlock()
	if best < 0 {
		delete(fw.rtt, broker)
		return
	}
	fw.rtt[broker] = best
	if best >= fw.farRTT {
		fw.r.log.Info("source broker is far away: larger fetches and two in flight while behind",
			zap.Int32("broker", broker), zap.Duration("round_trip", best))
		for _, cl := range fw.lanes[1:] {
			go openFetch(ctx, cl, broker)
		}
	}
}

// metadataNoTopics is a Metadata request for the brokers only (a nil topic
// list asks for every topic).
func metadataNoTopics() *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	return req
}

// openFetch opens cl's connection for Fetch requests to broker, if it is not
// open, with a Fetch for no partitions, which the broker answers at once.
// franz-go opens connections when a request needs them, each costing
// round trips (TCP's handshake, ApiVersions) before the request goes.
func openFetch(ctx context.Context, cl *kgo.Client, broker int32) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.SessionEpoch, req.MaxBytes = -1, -1, 1
	_, _ = cl.Broker(int(broker)).Request(ctx, req)
}

// warm readies the fetch loop's first requests while the flow starts (which
// takes several round trips in turn to the source: its topics, the offsets
// to start at): it looks up the source's brokers with the Source client,
// opens its connections for Fetch requests to each, and measures each one's
// round trip (far). Across regions a new connection costs two round trips
// before its first request, and the measure five: without warm they all came
// after the flow started, before the first Fetch (in the benchmark's 80 ms
// link the first records came 1.2 s after "flow started" without it, 0.85 s
// with it, most of that the first response's TCP slow start). Every source
// broker is warmed, as the leaders of the flow's partitions are not known
// yet; connections left idle are closed after connections.max.idle.ms.
func (fw *forwarder) warm(ctx context.Context) {
	resp, err := metadataNoTopics().RequestWith(ctx, fw.lanes[0])
	if err != nil {
		return // the fetch loop opens what it needs
	}
	var opening sync.WaitGroup
	for _, b := range resp.Brokers {
		fw.far(ctx, b.NodeID)
		opening.Go(func() { openFetch(ctx, fw.lanes[0], b.NodeID) })
	}
	opening.Wait()
}

// resize sets what p's next Fetch asks for. A partition fetched at
// max.partition.fetch.bytes advances that much per round trip: 1 MiB per
// 80 ms is 13 MB/s, whatever the link carries. So a partition of a far
// leader that is still behind after a Fetch that filled at least half of
// what it asked for is asked for twice as much next time, up to its share
// of fetch.max.bytes among the n partitions being fetched from its leader
// (the bound of what the responses on their way hold, and no partition
// starves the others). Caught up, it is asked for max.partition.fetch.bytes
// again.
func (fw *forwarder) resize(p *partition, got int, far, behind bool, n int) {
	size := max(p.fetchSize, fw.partitionMax)
	switch {
	case !behind:
		size = fw.partitionMax
	case far && got >= int(size)/2:
		size = max(fw.partitionMax, min(2*size, fw.fetchMax/int32(max(n, 1))))
	}
	p.fetchSize = size
}

// take turns one partition's fetched bytes into batches to send.
func (fw *forwarder) take(p *partition, rp *kmsg.FetchResponseTopicPartition, at int64) []*fwdBatch {
	var raws []rawBatch
	forward := true
	refetched := 0
	for in := rp.RecordBatches; ; {
		rb, rest, ok := nextBatch(in)
		if !ok {
			refetched += len(in) // a batch cut off, fetched again whole
			break
		}
		in = rest
		if rb.magic == 2 && rb.last() < p.next {
			refetched += len(rb.b) // wholly before the resume offset
			continue
		}
		raws = append(raws, rb)
		forward = forward && rb.forwardable(p.next)
	}
	fw.r.m.refetchedAdd(fw.r.flow, refetched)
	if len(raws) == 0 {
		return nil
	}
	if !forward || coalesce(raws) {
		return fw.reencode(p, rp, at)
	}
	r := fw.r
	r.checkContinuity(p, raws[0].base, rp.LogStartOffset)
	r.polled(p, time.UnixMilli(raws[0].firstTS))
	epoch := p.epoch.Load()
	out := make([]*fwdBatch, 0, len(raws))
	for _, rb := range raws {
		out = append(out, &fwdBatch{p: p, epoch: epoch, b: rb.b, up0: rb.base, n: int(rb.count), maxTS: rb.maxTS, size: len(rb.b)})
		p.inflight.Add(int64(rb.count))
		p.lastData = rb.last()
		p.next = rb.last() + 1
	}
	return out
}

// reencode decodes a partition's fetched bytes as the record path would and
// encodes the records to copy into batches of the forwarder's own. at is
// the offset the response was fetched at: a response fetched before the
// partition's next offset (an overlapping request's, or one asked at a
// prediction that fell short) is decoded from there and its records before
// the next offset dropped after. Decoded from the next offset, the
// response's aborted transactions would still be listed from before it
// while the abort markers that end them, also before it, are skipped
// unread (kgo skips a batch wholly before the offset it is given), so a
// later committed transaction of the same producer would be dropped as
// aborted.
func (fw *forwarder) reencode(p *partition, rp *kmsg.FetchResponseTopicPartition, at int64) []*fwdBatch {
	r := fw.r
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		KeepControlRecords: true,
		Offset:             min(at, p.next),
		IsolationLevel:     fw.isolation,
		Topic:              p.topic,
		Partition:          p.partition,
	}, rp, fw.decompressor, nil)
	if fp.Err != nil {
		fw.fetchError(p, fp.Err)
	}
	recs := fp.Records
	for len(recs) > 0 && recs[0].Offset < p.next {
		recs = recs[1:] // taken from an earlier response
	}
	if len(recs) == 0 {
		if next > p.next {
			p.next = next // aborted data only
		}
		return nil
	}
	r.checkContinuity(p, recs[0].Offset, rp.LogStartOffset)
	r.polled(p, recs[0].Timestamp)
	epoch := p.epoch.Load()
	var out []*fwdBatch
	var chunk []*kgo.Record
	flush := func() {
		if len(chunk) > 0 {
			out = append(out, fw.encode(p, epoch, chunk, func(rec *kgo.Record) int64 { return rec.Offset }))
			p.inflight.Add(int64(len(chunk)))
			chunk = nil
		}
	}
	size := 0
	for _, rec := range recs {
		if rec.Attrs.IsControl() {
			continue
		}
		n := recordSize(rec)
		if size > 0 && size+n > maxEncodedBatch {
			flush()
			size = 0
		}
		chunk, size = append(chunk, rec), size+n
		p.lastData = rec.Offset
	}
	flush()
	last := recs[len(recs)-1]
	p.next = max(next, last.Offset+1)
	if last.Attrs.IsControl() {
		p.markerAfter.Store(p.lastData)
		p.markerEnd.Store(p.next)
	}
	return out
}

// outOfRange handles a fetch offset the source no longer (or not yet) has:
// below the log start, retention removed records before they were copied,
// which is counted; above the end, the partition was truncated or
// recreated. Either way copying resumes at the log start, as the record
// path's consumer does.
func (fw *forwarder) outOfRange(ctx context.Context, p *partition) {
	r := fw.r
	starts, err := r.o.SourceAdmin.ListStartOffsets(ctx, p.topic)
	if err != nil {
		fw.fetchError(p, err)
		return
	}
	o, ok := starts.Lookup(p.topic, p.partition)
	switch {
	case !ok:
		fw.fetchError(p, errors.New("list start offset: the partition is missing from the response"))
		return
	case o.Err != nil:
		fw.fetchError(p, fmt.Errorf("list start offset: %w", o.Err))
		return
	}
	r.checkContinuity(p, o.Offset, o.Offset)
	if o.Offset > p.next {
		// Nothing below the log start is left to copy: once what was sent
		// is acknowledged, the position is the log start, so lag and
		// progress do not wait for a record after the gap to move.
		p.markerAfter.Store(p.lastData)
		p.markerEnd.Store(o.Offset)
	}
	p.next = o.Offset
}

// fetchError reports a fetch error of p (fetch goroutine only).
func (fw *forwarder) fetchError(p *partition, err error) {
	fw.troubled = true
	fw.r.fetchError(p.topic, p.partition, err)
}

// drop settles batches that will not be sent.
func (fw *forwarder) drop(w fwdWork) {
	for p, bs := range w {
		for _, b := range bs {
			p.inflight.Add(-int64(b.n))
		}
	}
}
