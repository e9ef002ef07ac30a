package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/mm2metrics"
)

// daemonOptions configure a daemon.
type daemonOptions struct {
	Config *config.Config
	// Targets limits the flows to those whose target is listed (MM2's
	// --clusters); empty means every enabled flow.
	Targets []string
	Log     *zap.Logger
	Level   zap.AtomicLevel
	// Registry receives every metric; tests pass a fresh one.
	Registry *prometheus.Registry
	// ListenAddress serves /metrics, /healthz and /readyz; "" disables it.
	ListenAddress string
	// DrainTimeout bounds each flow's drain at shutdown.
	DrainTimeout time.Duration
	// PartitionMetrics exports per-partition lag gauges.
	PartitionMetrics bool
	// MM2Names also exports MM2's metric names (internal/mm2metrics).
	MM2Names bool
	// Notifier tells systemd about readiness, reloads and stopping; nil
	// outside systemd.
	Notifier *notifier
	// Pprof serves net/http/pprof at /debug/pprof/.
	Pprof bool
	// MaxBufferedBytes bounds each flow's in-memory record bytes; 0 keeps
	// the file's client settings.
	MaxBufferedBytes int64
	// ProgressInterval is how often a flow logs progress on a backlog.
	ProgressInterval time.Duration
	// InstanceID is this process's static identity in the flows' groups
	// (internal/fence); "" joins them as a dynamic member.
	InstanceID string
	// UnreachableAfter is how long a flow's source or target may not
	// answer before /readyz reports the flow not ready; 0: never.
	UnreachableAfter time.Duration
	// LagInterval is how often each replicator refreshes its lag and
	// checks both clusters; 0: the replicator's default (5 s).
	LagInterval time.Duration
	// MaxSegments bounds each checkpointer's exact history per partition;
	// 0: checkpoint.DefaultMaxSegments.
	MaxSegments int
}

// daemon runs every selected flow and the HTTP endpoint, and applies
// reloaded configurations. It never installs signal handlers: run owns the
// process, so tests can run a daemon in process.
type daemon struct {
	o   daemonOptions
	log *zap.Logger
	m   *daemonMetrics
	mm2 *mm2metrics.Exporter // MM2's metric names; nil unless MM2Names

	// mu guards flows, which Run changes on reloads and /readyz reads.
	mu    sync.Mutex
	flows map[string]*flowHandle

	ln  net.Listener
	srv *http.Server

	reloads  chan reloadRequest
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}

	// runMu guards ran and stopped: a Stop before Run releases what
	// newDaemon took (the listener) instead of waiting for a Run that may
	// never come, and a Run after Stop returns at once.
	runMu        sync.Mutex
	ran, stopped bool
}

// flowHandle is a running flow: its runner, the fingerprint of the
// settings it runs with, and how to stop it.
type flowHandle struct {
	fr          *flowRunner
	fingerprint string
	cancel      context.CancelFunc
	done        chan struct{}
}

type reloadRequest struct {
	cfg    *config.Config
	result chan error
}

// errListen marks a failure to bind the HTTP listener: a runtime failure
// (the port is taken, say), not a bad file or flag.
var errListen = errors.New("web listener")

// newDaemon checks the selection, registers the process metrics and binds
// the HTTP listener, so that an unusable address fails before any flow runs.
func newDaemon(o daemonOptions) (*daemon, error) {
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 10 * time.Second
	}
	d := &daemon{o: o, log: o.Log, flows: make(map[string]*flowHandle),
		reloads: make(chan reloadRequest), stop: make(chan struct{}), done: make(chan struct{})}
	if _, err := d.selectFlows(o.Config); err != nil {
		return nil, err
	}
	d.m = newDaemonMetrics(o.Registry)
	o.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var gather prometheus.Gatherer = o.Registry
	if o.MM2Names {
		// A registry of its own: the exporter reads mm2go's at each scrape.
		d.mm2 = mm2metrics.New(o.Registry)
		mm2Reg := prometheus.NewRegistry()
		mm2Reg.MustRegister(d.mm2)
		gather = prometheus.Gatherers{o.Registry, mm2Reg}
	}
	if o.ListenAddress != "" {
		ln, err := net.Listen("tcp", o.ListenAddress)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w: %w", o.ListenAddress, errListen, err)
		}
		d.ln = ln
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{Registry: o.Registry}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		mux.HandleFunc("/readyz", d.ready)
		mux.HandleFunc("/api/v1/offsets", d.offsetsAPI)
		mux.HandleFunc("/", d.statusPage)
		if o.Pprof {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		d.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	}
	return d, nil
}

// selectFlows returns the flows of cfg this daemon runs, by name: the
// enabled flows, and the heartbeat-only pairs MM2 also runs,
// limited to the --clusters targets. At least one enabled flow is required.
func (d *daemon) selectFlows(cfg *config.Config) (map[string]*config.Flow, error) {
	targets := make(map[string]bool, len(d.o.Targets))
	for _, t := range d.o.Targets {
		if cfg.Cluster(t) == nil {
			return nil, fmt.Errorf("--clusters: unknown cluster %q", t)
		}
		targets[t] = true
	}
	out := make(map[string]*config.Flow)
	enabled := 0
	for _, f := range cfg.Flows {
		if !f.Active() || (len(targets) > 0 && !targets[f.Target]) {
			continue
		}
		if !f.Enabled && len(f.Client(config.RoleTargetProducer).BootstrapServers) == 0 {
			continue // a heartbeat-only pair into a cluster the file cannot reach
		}
		if f.Enabled {
			enabled++
		}
		out[f.Name()] = f
	}
	if enabled == 0 {
		return nil, errors.New("no source->target replication flows selected")
	}
	return out, nil
}

// Addr is the HTTP listener's address, or "" without one.
func (d *daemon) Addr() string {
	if d.ln == nil {
		return ""
	}
	return d.ln.Addr().String()
}

// ready answers 200 when every flow runs, 503 with the ones that do not.
func (d *daemon) ready(w http.ResponseWriter, _ *http.Request) {
	var down []string
	d.mu.Lock()
	for name, h := range d.flows {
		if why := h.fr.unreachable(d.o.UnreachableAfter); why != "" {
			down = append(down, name+" ("+why+")")
			continue
		}
		// A flow another instance runs (this one stands by) is ready:
		// standing by is its job.
		if _, ok := h.fr.stats(); (h.fr.flow.Enabled && !ok && !h.fr.standingBy()) || !d.m.isUp(name) {
			down = append(down, name)
		}
	}
	d.mu.Unlock()
	if len(down) > 0 {
		sort.Strings(down)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "not ready: %v\n", down)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// Run serves HTTP and runs the flows until ctx is cancelled or Stop is
// called, applying reloads in between; then it stops the flows (each drains
// within DrainTimeout, all at once) and the HTTP server. It returns once
// everything stopped.
func (d *daemon) Run(ctx context.Context) error {
	d.runMu.Lock()
	if d.stopped {
		d.runMu.Unlock()
		return nil
	}
	d.ran = true
	d.runMu.Unlock()
	defer close(d.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var httpErr error
	if d.srv != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.srv.Serve(d.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				httpErr = fmt.Errorf("serve http: %w", err)
				cancel()
			}
		}()
	}
	startErr := d.apply(ctx, d.o.Config)
	if startErr != nil {
		startErr = fmt.Errorf("start flows: %w", startErr)
		cancel()
	} else {
		d.notify(notifyReady)
		d.log.Info("mm2go started", zap.Int("flows", len(d.flows)), zap.String("http_address", d.Addr()))
	}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-d.stop:
			break loop
		case req := <-d.reloads:
			d.notify(notifyReloading)
			err := d.apply(ctx, req.cfg)
			d.m.reloaded(err == nil)
			d.notify(notifyReady)
			req.result <- err
		}
	}
	d.notify(notifyStopping)
	stopping := time.Now()
	cancel()
	d.mu.Lock()
	handles := slices.Collect(maps.Values(d.flows))
	d.mu.Unlock()
	for _, h := range handles {
		<-h.done
	}
	if d.srv != nil {
		sctx, cancelHTTP := context.WithTimeout(context.Background(), 5*time.Second)
		_ = d.srv.Shutdown(sctx)
		cancelHTTP()
	}
	wg.Wait()
	d.log.Info("mm2go stopped", zap.Duration("took", time.Since(stopping)))
	return errors.Join(startErr, httpErr)
}

// notify sends a state to systemd, if it listens.
func (d *daemon) notify(state string) {
	if err := d.o.Notifier.notify(state); err != nil {
		d.log.Warn("notify systemd", zap.String("state", state), zap.Error(err))
	}
}

// Reload asks Run to switch to cfg: flows whose settings did not change
// keep running untouched; changed flows are stopped (drained) and started
// again; removed ones are stopped; new ones started. On error (cfg selects
// no enabled flow) nothing changes. It returns once the switch is done.
func (d *daemon) Reload(ctx context.Context, cfg *config.Config) error {
	req := reloadRequest{cfg: cfg, result: make(chan error, 1)}
	select {
	case d.reloads <- req:
	case <-d.done:
		return errors.New("daemon stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-req.result
}

// apply brings the running flows in line with cfg. Run's goroutine only.
func (d *daemon) apply(ctx context.Context, cfg *config.Config) error {
	want, err := d.selectFlows(cfg)
	if err != nil {
		return err
	}
	// The changed flows stop together, so that a reload takes one drain
	// (--drain-timeout) however many flows it changes, and without the
	// lock, so that /readyz answers meanwhile.
	d.mu.Lock()
	var stopped, started []string
	var stopping []*flowHandle
	for name, h := range d.flows {
		if f, ok := want[name]; ok && f.Fingerprint() == h.fingerprint {
			continue
		}
		h.cancel()
		stopping = append(stopping, h)
		delete(d.flows, name)
		stopped = append(stopped, name)
	}
	d.mu.Unlock()
	for _, h := range stopping {
		<-h.done
	}
	for _, name := range stopped {
		if _, ok := want[name]; !ok {
			d.m.forgetFlow(name) // gone, not restarted: its series end
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, f := range want {
		if _, ok := d.flows[name]; ok {
			continue
		}
		fctx, cancel := context.WithCancel(ctx)
		h := &flowHandle{
			fr: &flowRunner{
				flow:             f,
				log:              d.o.Log.With(zap.String("flow", name)),
				base:             d.o.Log,
				lvl:              d.o.Level,
				reg:              d.o.Registry,
				m:                d.m,
				drainTimeout:     d.o.DrainTimeout,
				partitionMetrics: d.o.PartitionMetrics,
				mm2:              d.mm2,
				maxBufferedBytes: d.o.MaxBufferedBytes,
				progressInterval: d.o.ProgressInterval,
				lagInterval:      d.o.LagInterval,
				maxSegments:      d.o.MaxSegments,
				instanceID:       d.o.InstanceID,
			},
			fingerprint: f.Fingerprint(),
			cancel:      cancel,
			done:        make(chan struct{}),
		}
		d.flows[name] = h
		d.m.initFlow(name)
		started = append(started, name)
		go func() {
			defer close(h.done)
			h.fr.supervise(fctx)
		}()
	}
	if len(stopped) > 0 || len(started) > 0 {
		sort.Strings(stopped)
		sort.Strings(started)
		d.log.Info("flows applied", zap.Strings("stopped", stopped), zap.Strings("started", started), zap.Int("running", len(d.flows)))
	}
	return nil
}

// Stop makes Run return and waits for it. It is idempotent and safe to
// call before Run.
func (d *daemon) Stop() {
	d.stopOnce.Do(func() { close(d.stop) })
	d.runMu.Lock()
	ran := d.ran
	d.stopped = true
	d.runMu.Unlock()
	if !ran {
		if d.ln != nil {
			_ = d.ln.Close()
		}
		return
	}
	<-d.done
}

// daemonMetrics are the process-level metrics.
type daemonMetrics struct {
	up         *prometheus.GaugeVec
	restarts   *prometheus.CounterVec
	workers    *prometheus.CounterVec
	tasks      *prometheus.GaugeVec
	taskDefs   *prometheus.GaugeVec
	lost       *prometheus.CounterVec
	gen        *prometheus.GaugeVec
	rebal      *prometheus.CounterVec
	rebalSec   *prometheus.CounterVec
	reload     prometheus.Gauge
	reloadTS   prometheus.Gauge
	certExpiry *prometheus.GaugeVec
	unreach    *prometheus.GaugeVec
	mu         sync.Mutex
	upFlows    map[string]bool
}

func newDaemonMetrics(reg prometheus.Registerer) *daemonMetrics {
	f := promauto.With(reg)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "mm2go_build_info",
		Help:        "Build information; always 1.",
		ConstLabels: prometheus.Labels{"version": version, "commit": commit},
	}, func() float64 { return 1 })
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return f.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return f.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	m := &daemonMetrics{
		up: gauge("mm2go_flow_up",
			"1 once the flow's clusters answered its connectivity check and while it runs or stands by; 0 during the check and while it waits to restart.",
			"flow"),
		restarts: counter("mm2go_flow_restarts_total",
			"Restarts of a flow after a failure.",
			"flow"),
		workers: counter("mm2go_flow_worker_restarts_total",
			"Restarts of a flow's heartbeat or checkpoint worker after a failure; replication goes on meanwhile.",
			"flow", "reason"),
		tasks: gauge("mm2go_flow_tasks",
			"Tasks of the flow this instance runs (0: it stands by or waits for the flow's group). Summed over instances it is mm2go_flow_tasks_configured when every task runs.",
			"flow"),
		taskDefs: gauge("mm2go_flow_tasks_configured",
			"Tasks the flow is split into (partitions of its task topic, created from tasks.max), while this instance is in the flow's group.",
			"flow"),
		lost: counter("mm2go_flow_tasks_lost_total",
			"Times a task this instance ran was taken from it (revoked in a rebalance, session timed out, or fenced by the next holder).",
			"flow"),
		gen: gauge("mm2go_flow_group_generation",
			"Generation of the flow's group at this instance's last assignment.",
			"flow"),
		rebal: counter("mm2go_flow_rebalances_total",
			"Assignments of the flow's group this instance received (one per rebalance it took part in).",
			"flow"),
		rebalSec: counter("mm2go_flow_rebalance_seconds_total",
			"Time this instance spent in rebalances stopping the tasks it gave up (the group waits for it).",
			"flow"),
		reload: f.NewGauge(prometheus.GaugeOpts{
			Name: "mm2go_config_last_reload_successful",
			Help: "1 if the last configuration reload (SIGHUP) succeeded or none was tried, 0 if it failed and the previous configuration still runs.",
		}),
		certExpiry: gauge("mm2go_tls_certificate_expiry_timestamp_seconds",
			"When a certificate a flow's clients present (certificate=client) or trust (certificate=trusted) expires, in seconds since the Unix epoch; loading the file warns 14 days before.",
			"flow", "cluster", "certificate", "subject"),
		unreach: gauge("mm2go_flow_cluster_unreachable_seconds",
			"How long the flow's checks of a cluster (cluster: source or target; a Metadata request every 5 s) have failed without a break; 0 while it answers. /readyz reports the flow not ready once it reaches --ready.unreachable-after.",
			"flow", "cluster"),
		reloadTS: f.NewGauge(prometheus.GaugeOpts{
			Name: "mm2go_config_last_reload_success_timestamp_seconds",
			Help: "When the configuration was last loaded successfully (start or reload), in seconds since the Unix epoch.",
		}),
		upFlows: make(map[string]bool),
	}
	m.reload.Set(1)
	m.reloadTS.SetToCurrentTime()
	return m
}

// reloaded records the outcome of a reload.
func (m *daemonMetrics) reloaded(ok bool) {
	if ok {
		m.reload.Set(1)
		m.reloadTS.SetToCurrentTime()
	} else {
		m.reload.Set(0)
	}
}

// initFlow creates a flow's counter series at zero, so that alerts on
// increase() see the first restart.
func (m *daemonMetrics) initFlow(flow string) {
	m.restarts.WithLabelValues(flow)
	m.lost.WithLabelValues(flow)
	m.rebal.WithLabelValues(flow)
	m.rebalSec.WithLabelValues(flow)
	for _, w := range []string{"heartbeat", "checkpoint"} {
		m.workers.WithLabelValues(flow, w)
	}
}

// forgetFlow deletes the series of a flow that a reload removed, so that
// no alert fires on its last values.
func (m *daemonMetrics) forgetFlow(flow string) {
	labels := prometheus.Labels{"flow": flow}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{m.up, m.restarts, m.workers, m.tasks, m.taskDefs, m.lost, m.gen, m.rebal, m.rebalSec, m.certExpiry, m.unreach} {
		v.DeletePartialMatch(labels)
	}
	m.mu.Lock()
	delete(m.upFlows, flow)
	m.mu.Unlock()
}

// certificates sets the expiry series of a flow's certificates, replacing
// those of its previous settings.
func (m *daemonMetrics) certificates(f *config.Flow) {
	m.certExpiry.DeletePartialMatch(prometheus.Labels{"flow": f.Name()})
	for _, c := range f.Certificates() {
		m.certExpiry.WithLabelValues(f.Name(), c.Cluster, c.Kind, c.Subject).Set(float64(c.NotAfter.Unix()))
	}
}

func (m *daemonMetrics) flowUp(flow string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.up.WithLabelValues(flow).Set(v)
	m.mu.Lock()
	m.upFlows[flow] = up
	m.mu.Unlock()
}

func (m *daemonMetrics) isUp(flow string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.upFlows[flow]
}

func (m *daemonMetrics) workerRestart(flow, worker string) {
	m.workers.WithLabelValues(flow, worker).Inc()
}

// assigned records an assignment of the flow's group.
func (m *daemonMetrics) assigned(flow string, gen int32) {
	m.gen.WithLabelValues(flow).Set(float64(gen))
	m.rebal.WithLabelValues(flow).Inc()
}

// running sets how many of the flow's tasks this instance runs.
func (m *daemonMetrics) running(flow string, n int) { m.tasks.WithLabelValues(flow).Set(float64(n)) }

// inGroup records that the flow's group is joined, the flow split into n
// tasks, or left (n < 0).
func (m *daemonMetrics) inGroup(flow string, n int) {
	if n < 0 {
		m.taskDefs.DeleteLabelValues(flow)
		return
	}
	m.taskDefs.WithLabelValues(flow).Set(float64(n))
}

func (m *daemonMetrics) revoked(flow string, took time.Duration) {
	m.rebalSec.WithLabelValues(flow).Add(took.Seconds())
}

func (m *daemonMetrics) unreachable(flow, cluster string, d time.Duration) {
	m.unreach.WithLabelValues(flow, cluster).Set(d.Seconds())
}

func (m *daemonMetrics) taskLost(flow string) { m.lost.WithLabelValues(flow).Inc() }

func (m *daemonMetrics) flowRestart(flow string) {
	m.restarts.WithLabelValues(flow).Inc()
}
