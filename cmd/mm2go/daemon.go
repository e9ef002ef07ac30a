package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/config"
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
}

// daemon runs every selected flow and the HTTP endpoint. It never installs
// signal handlers: run owns the process, so tests can run a daemon in
// process.
type daemon struct {
	o     daemonOptions
	log   *zap.Logger
	m     *daemonMetrics
	flows []*flowRunner

	ln  net.Listener
	srv *http.Server

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

// newDaemon checks the selection, registers the process metrics and binds
// the HTTP listener, so that an unusable address fails before any flow runs.
func newDaemon(o daemonOptions) (*daemon, error) {
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 10 * time.Second
	}
	d := &daemon{o: o, log: o.Log, done: make(chan struct{})}
	d.m = newDaemonMetrics(o.Registry)
	o.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	targets := make(map[string]bool, len(o.Targets))
	for _, t := range o.Targets {
		if o.Config.Cluster(t) == nil {
			return nil, fmt.Errorf("--clusters: unknown cluster %q", t)
		}
		targets[t] = true
	}
	for _, f := range o.Config.Flows {
		if !f.Active() || (len(targets) > 0 && !targets[f.Target]) {
			continue
		}
		if !f.Enabled && len(f.Client(config.RoleTargetProducer).BootstrapServers) == 0 {
			continue // a heartbeat-only pair into a cluster the file cannot reach
		}
		d.flows = append(d.flows, &flowRunner{
			flow:             f,
			log:              o.Log.With(zap.String("flow", f.Name())),
			base:             o.Log,
			lvl:              o.Level,
			reg:              o.Registry,
			m:                d.m,
			drainTimeout:     o.DrainTimeout,
			partitionMetrics: o.PartitionMetrics,
		})
	}
	enabled := 0
	for _, fr := range d.flows {
		if fr.flow.Enabled {
			enabled++
		}
	}
	if enabled == 0 {
		return nil, errors.New("no source->target replication flows selected")
	}
	if o.ListenAddress != "" {
		ln, err := net.Listen("tcp", o.ListenAddress)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", o.ListenAddress, err)
		}
		d.ln = ln
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{Registry: o.Registry}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		mux.HandleFunc("/readyz", d.ready)
		d.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	}
	return d, nil
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
	for _, fr := range d.flows {
		if _, ok := fr.stats(); (fr.flow.Enabled && !ok) || !d.m.isUp(fr.flow.Name()) {
			down = append(down, fr.flow.Name())
		}
	}
	if len(down) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "not ready: %v\n", down)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// Run serves HTTP and runs the flows until ctx is cancelled or Stop is
// called, then stops the flows (each drains within DrainTimeout) and the HTTP
// server. It returns once everything stopped.
func (d *daemon) Run(ctx context.Context) error {
	ctx, d.cancel = context.WithCancel(ctx)
	defer close(d.done)
	var wg sync.WaitGroup
	var httpErr error
	if d.srv != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.srv.Serve(d.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				httpErr = fmt.Errorf("serve http: %w", err)
				d.cancel()
			}
		}()
	}
	d.log.Info("mm2go started", zap.Int("flows", len(d.flows)), zap.String("http_address", d.Addr()))
	var flows sync.WaitGroup
	for _, fr := range d.flows {
		flows.Go(func() { fr.supervise(ctx) })
	}
	<-ctx.Done()
	flows.Wait()
	if d.srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = d.srv.Shutdown(sctx)
		cancel()
	}
	wg.Wait()
	d.log.Info("mm2go stopped")
	return httpErr
}

// Stop cancels Run and waits for it to return. It is idempotent.
func (d *daemon) Stop() {
	d.stopOnce.Do(func() {
		if d.cancel != nil {
			d.cancel()
			<-d.done
		}
	})
}

// daemonMetrics are the process-level metrics.
type daemonMetrics struct {
	up       *prometheus.GaugeVec
	restarts *prometheus.CounterVec
	workers  *prometheus.CounterVec
	mu       sync.Mutex
	upFlows  map[string]bool
}

func newDaemonMetrics(reg prometheus.Registerer) *daemonMetrics {
	f := promauto.With(reg)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "mm2go_build_info",
		Help:        "Build information; always 1.",
		ConstLabels: prometheus.Labels{"version": version, "commit": commit},
	}, func() float64 { return 1 })
	return &daemonMetrics{
		up: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mm2go_flow_up",
			Help: "1 while the flow's workers run, 0 while it waits to restart.",
		}, []string{"flow"}),
		restarts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "mm2go_flow_restarts_total",
			Help: "Restarts of a flow after a failure.",
		}, []string{"flow"}),
		workers: f.NewCounterVec(prometheus.CounterOpts{
			Name: "mm2go_flow_worker_restarts_total",
			Help: "Restarts of a flow's heartbeat or checkpoint worker after a failure; replication goes on meanwhile.",
		}, []string{"flow", "reason"}),
		upFlows: make(map[string]bool),
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

func (m *daemonMetrics) flowRestart(flow string) {
	m.restarts.WithLabelValues(flow).Inc()
}
