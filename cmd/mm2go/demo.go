package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/config"
)

// demoTopics are created on the demo's primary cluster at start; demoLate
// is created a few seconds later to show topic discovery.
var (
	demoTopics = []string{"orders", "payments"}
	demoLate   = "refunds"
)

// runDemo starts two in-process Kafka-compatible clusters (kfake), a producer
// writing to a few topics of the first, and mm2go replicating them to the
// second, printing progress until interrupted or --duration elapsed. At the
// end it checks that every produced record arrived.
func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mm2go demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cf       commonFlags
		duration time.Duration
		rate     int
	)
	cf.register(fs, "127.0.0.1:9464")
	fs.DurationVar(&duration, "duration", 0, "stop after this long (default: run until interrupted)")
	fs.IntVar(&rate, "rate", 2000, "records per second the demo producer writes")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	if cf.logLevel == "info" {
		cf.logLevel = "warn" // keep the terminal for the progress lines
	}
	reg := prometheus.NewRegistry()
	log, lvl, err := newLogger(stderr, cf.logLevel, logFormat(cf.logFormat), reg)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "mm2go demo: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, duration)
		defer cancel()
	}
	if err := demo(ctx, demoOptions{out: stdout, log: log, lvl: lvl, reg: reg, listen: cf.listen, rate: rate, drain: cf.drainTimeout}); err != nil {
		_, _ = fmt.Fprintf(stderr, "mm2go demo: %v\n", err)
		return exitFailure
	}
	return exitOK
}

type demoOptions struct {
	out    io.Writer
	log    *zap.Logger
	lvl    zap.AtomicLevel
	reg    *prometheus.Registry
	listen string
	rate   int
	drain  time.Duration
}

func demo(ctx context.Context, o demoOptions) error {
	primary, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ClusterID("primary"))
	if err != nil {
		return fmt.Errorf("start demo cluster primary: %w", err)
	}
	defer primary.Close()
	secondary, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ClusterID("secondary"))
	if err != nil {
		return fmt.Errorf("start demo cluster secondary: %w", err)
	}
	defer secondary.Close()

	dir, err := os.MkdirTemp("", "mm2go-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	props := demoProperties(primary.ListenAddrs(), secondary.ListenAddrs())
	cfg, _, err := config.Parse([]byte(props), dir)
	if err != nil {
		return fmt.Errorf("demo configuration: %w", err)
	}

	pcl, err := kgo.NewClient(kgo.SeedBrokers(primary.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer pcl.Close()
	padm := kadm.NewClient(pcl)
	if _, err := padm.CreateTopics(ctx, 3, 1, nil, demoTopics...); err != nil {
		return fmt.Errorf("create demo topics: %w", err)
	}

	_, _ = fmt.Fprintf(o.out, "mm2go demo: two in-process Kafka clusters, primary %s and secondary %s.\n", strings.Join(primary.ListenAddrs(), ","), strings.Join(secondary.ListenAddrs(), ","))
	_, _ = fmt.Fprintf(o.out, "Replicating with this MirrorMaker 2 configuration:\n\n%s\n", indent(props))

	d, err := newDaemon(daemonOptions{Config: cfg, Log: o.log, Level: o.lvl, Registry: o.reg, ListenAddress: o.listen, DrainTimeout: o.drain})
	if err != nil {
		return err
	}
	if a := d.Addr(); a != "" {
		_, _ = fmt.Fprintf(o.out, "Metrics: http://%s/metrics   Stop with Ctrl-C.\n\n", a)
	}

	var produced atomic.Int64
	var wg sync.WaitGroup
	prodCtx, stopProducer := context.WithCancel(ctx)
	defer stopProducer()
	var prodErr error
	wg.Go(func() { prodErr = demoProduce(prodCtx, pcl, padm, o.rate, &produced) })

	// The daemon outlives the interrupt: the producer stops first, then
	// the daemon copies what is left, then it stops.
	dctx, stopDaemon := context.WithCancel(context.WithoutCancel(ctx))
	defer stopDaemon()
	daemonDone := make(chan error, 1)
	go func() { daemonDone <- d.Run(dctx) }()

	counter, err := newDemoCounter(secondary.ListenAddrs())
	if err != nil {
		return err
	}
	defer counter.cl.Close()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	start := time.Now()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			copied, topics := counter.count(ctx, false)
			_, _ = fmt.Fprintf(o.out, "%5.0fs  produced %8d   copied %8d   lag %6d   remote topics: %s\n",
				time.Since(start).Seconds(), produced.Load(), copied, max(produced.Load()-copied, 0), strings.Join(topics, " "))
		}
	}
	stopProducer()
	wg.Wait()
	if prodErr != nil && ctx.Err() == nil {
		stopDaemon()
		return errors.Join(fmt.Errorf("demo producer: %w", prodErr), <-daemonDone)
	}

	// Let the daemon copy what the producer wrote last, then stop it and
	// check that nothing is missing.
	want := produced.Load()
	vctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	copied, _ := counter.count(vctx, false)
	for copied < want && vctx.Err() == nil {
		copied, _ = counter.count(vctx, false)
	}
	stopDaemon()
	if err := <-daemonDone; err != nil {
		return err
	}
	// Everything the daemon wrote, to the ends: a record copied twice
	// would show here.
	copied, _ = counter.count(vctx, true)
	_, _ = fmt.Fprintf(o.out, "\nproduced %d records, the secondary holds %d in their remote topics\n", want, copied)
	switch {
	case copied < want:
		return fmt.Errorf("%d records missing on the secondary", want-copied)
	case copied > want:
		return fmt.Errorf("%d records more on the secondary than produced", copied-want)
	}
	_, _ = fmt.Fprintln(o.out, "OK: every record was replicated")
	return nil
}

func demoProperties(primary, secondary []string) string {
	return `clusters = primary, secondary
primary.bootstrap.servers = ` + strings.Join(primary, ",") + `
secondary.bootstrap.servers = ` + strings.Join(secondary, ",") + `
primary->secondary.enabled = true
primary->secondary.topics = .*
replication.factor = 1
offset-syncs.topic.replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
secondary.offset.storage.replication.factor = 1
secondary.offset.flush.interval.ms = 1000
refresh.topics.interval.seconds = 2
`
}

// demoProduce writes keyed records with headers to the demo topics at about
// rate records per second, and creates demoLate after five seconds.
func demoProduce(ctx context.Context, cl *kgo.Client, adm *kadm.Client, rate int, produced *atomic.Int64) error {
	topics := append([]string(nil), demoTopics...)
	const tick = 50 * time.Millisecond
	perTick := max(rate*int(tick)/int(time.Second), 1)
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	var n int64
	for {
		select {
		case <-ctx.Done():
			// Let what was handed to the client finish, so the count is exact.
			fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := cl.Flush(fctx); err != nil {
				return err
			}
			return ctx.Err()
		case <-t.C:
		}
		if len(topics) == len(demoTopics) && time.Since(start) > 5*time.Second {
			if _, err := adm.CreateTopics(ctx, 3, 1, nil, demoLate); err == nil {
				topics = append(topics, demoLate)
			}
		}
		for range perTick {
			n++
			r := &kgo.Record{
				Topic:     topics[n%int64(len(topics))],
				Partition: int32(n % 3),
				Key:       []byte("key-" + strconv.FormatInt(n%100, 10)),
				Value:     []byte("value-" + strconv.FormatInt(n, 10)),
				Headers:   []kgo.RecordHeader{{Key: "source", Value: []byte("mm2go-demo")}},
			}
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err == nil {
					produced.Add(1)
				}
			})
		}
	}
}

// demoCounter counts the records of the remote topics of the demo's
// topics on the secondary by reading them: their end offsets would count
// the transaction markers of the copy's fencing too, and heartbeats and
// checkpoints land in topics named primary.* as well.
type demoCounter struct {
	cl      *kgo.Client
	adm     *kadm.Client
	remotes []string
	n       int64
	next    map[string]map[int32]int64 // offset after the last record read
}

func newDemoCounter(seeds []string) (*demoCounter, error) {
	var remotes []string
	for _, t := range append(slices.Clone(demoTopics), demoLate) {
		remotes = append(remotes, "primary."+t)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(remotes...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords(),
		kgo.MetadataMinAge(250*time.Millisecond), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	return &demoCounter{cl: cl, adm: kadm.NewClient(cl), remotes: remotes, next: make(map[string]map[int32]int64)}, nil
}

// count reads what arrived (until a poll of 100 ms brings nothing, for at
// most about 300 ms; with toEnd, until every partition was read to its end
// offset) or until ctx ends, and returns the records read so far and the
// topics they are in.
func (c *demoCounter) count(ctx context.Context, toEnd bool) (int64, []string) {
	var ends kadm.ListedOffsets
	if toEnd {
		var err error
		if ends, err = c.adm.ListEndOffsets(ctx, c.remotes...); err != nil {
			return c.n, c.topics()
		}
	}
	until := time.Now().Add(300 * time.Millisecond)
	for {
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		fs := c.cl.PollFetches(pctx)
		cancel()
		got := fs.NumRecords()
		fs.EachRecord(func(r *kgo.Record) {
			if c.next[r.Topic] == nil {
				c.next[r.Topic] = make(map[int32]int64)
			}
			c.next[r.Topic][r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				c.n++
			}
		})
		behind := false
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil && c.next[o.Topic][o.Partition] < o.Offset {
				behind = true
			}
		})
		if (toEnd && !behind) || (!toEnd && (got == 0 || time.Now().After(until))) || ctx.Err() != nil {
			return c.n, c.topics()
		}
	}
}

func (c *demoCounter) topics() []string {
	return slices.Sorted(maps.Keys(c.next))
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
