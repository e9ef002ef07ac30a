// Package mm2metrics exports mm2go's figures under the names Apache
// MirrorMaker 2's metrics have in Prometheus when the JMX exporter scrapes
// them with Strimzi's rules (kafka_connect_mirror_mirrorsourceconnector_*,
// kafka_connect_mirror_mirrorcheckpointconnector_*, and the Connect worker,
// client and JVM series Strimzi's KafkaMirrorMaker2 dashboard queries), so
// that dashboards and alerts built for MM2 keep working after the switch.
//
// The exporter is opt-in (mm2go --metrics.mm2-names). Its own figures are
// kept per source partition, task and checkpoint the way MM2 keeps them
// (cumulative counts, last values, and min, max, avg and rate over Kafka's
// two samples of 30 seconds); the worker and client series are computed at
// each scrape from mm2go's own registry and the Go runtime. A nil
// *Exporter, *Task or *Partition records nothing.
package mm2metrics

import (
	"math"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Prefixes of the series, as the JMX exporter names MM2's MBeans
// kafka.connect.mirror:type=MirrorSourceConnector and
// type=MirrorCheckpointConnector (names lower-cased, '-' made '_').
const (
	sourcePrefix     = "kafka_connect_mirror_mirrorsourceconnector_"
	checkpointPrefix = "kafka_connect_mirror_mirrorcheckpointconnector_"
)

// defaultBufferBytes is the Kafka producer's buffer.memory default, the
// capacity kafka_producer_buffer_available_bytes is reported against when
// the flow sets none.
const defaultBufferBytes = 32 << 20

// Exporter is a prometheus.Collector of MM2's series. Register it on a
// registry of its own: it reads own, mm2go's registry, at every scrape.
type Exporter struct {
	own prometheus.Gatherer
	now func() time.Time

	mu    sync.Mutex
	tasks map[taskKey]*Task
	cps   map[cpKey]*checkpointStat
}

type taskKey struct {
	source, target string
	task           int
}

type cpKey struct {
	source, target, group, topic string
	partition                    int32
}

type checkpointStat struct {
	last    float64
	latency window
}

// New returns an exporter that computes the worker-level series from own.
func New(own prometheus.Gatherer) *Exporter {
	return &Exporter{own: own, now: time.Now, tasks: make(map[taskKey]*Task), cps: make(map[cpKey]*checkpointStat)}
}

// Task is one source task of a flow (MM2's MirrorSourceConnector-N).
type Task struct {
	e              *Exporter
	source, target string
	task           int
	bufferBytes    int64

	mu      sync.Mutex // guards parts and commits
	parts   map[partKey]*Partition
	commits window
}

type partKey struct {
	remote    string
	partition int32
}

// Task returns new figures of task n of the flow source->target, whose
// producer holds at most bufferBytes (0: Kafka's default, 32 MiB); they
// replace the task's figures of before (a restarted task starts from zero,
// as MM2's do).
func (e *Exporter) Task(source, target string, n int, bufferBytes int64) *Task {
	if e == nil {
		return nil
	}
	if bufferBytes <= 0 {
		bufferBytes = defaultBufferBytes
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t := &Task{e: e, source: source, target: target, task: n, bufferBytes: bufferBytes, parts: make(map[partKey]*Partition)}
	e.tasks[taskKey{source, target, n}] = t
	return t
}

// Close removes the task's series: it stopped on this instance (unless the
// task started again meanwhile and has new figures).
func (t *Task) Close() {
	if t == nil {
		return
	}
	k := taskKey{t.source, t.target, t.task}
	t.e.mu.Lock()
	if t.e.tasks[k] == t {
		delete(t.e.tasks, k)
	}
	t.e.mu.Unlock()
}

// Partition returns the figures of a source partition the task copies to
// remote; inflight counts its records fetched and not yet acknowledged.
func (t *Task) Partition(topic, remote string, partition int32, inflight *atomic.Int64) *Partition {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k := partKey{remote, partition}
	p := t.parts[k]
	if p == nil {
		p = &Partition{topic: topic}
		t.parts[k] = p
	}
	p.inflight = inflight
	return p
}

// Forget removes a partition's series: the task no longer copies it.
func (t *Task) Forget(remote string, partition int32) {
	if t == nil {
		return
	}
	t.mu.Lock()
	delete(t.parts, partKey{remote, partition})
	t.mu.Unlock()
}

// Committed records one store of the task's progress that took d (Connect's
// offset-commit-avg-time-ms).
func (t *Task) Committed(d time.Duration) {
	if t == nil {
		return
	}
	now := t.e.now().UnixMilli()
	t.mu.Lock()
	t.commits.record(now, float64(d.Microseconds())/1000)
	t.mu.Unlock()
}

// Partition holds one source partition's figures.
type Partition struct {
	topic    string // the source topic (the consumer's lag is labelled by it)
	inflight *atomic.Int64

	mu                 sync.Mutex
	count, bytes       float64
	rate, byteRate     window
	ageLast, latLast   float64
	age, latency       window
	lag                float64
	hasAge, hasLatency bool
}

// Polled records a fetched batch whose oldest record was ageMs old
// (MM2's record-age-ms, recorded per record at poll; mm2go per batch).
func (p *Partition) Polled(now time.Time, ageMs float64) {
	if p == nil {
		return
	}
	ms := now.UnixMilli()
	p.mu.Lock()
	p.ageLast, p.hasAge = ageMs, true
	p.age.record(ms, ageMs)
	p.mu.Unlock()
}

// Acked records n records of size bytes the target acknowledged, the newest
// latencyMs after its timestamp (MM2's record-count, byte-count and
// replication-latency-ms).
func (p *Partition) Acked(now time.Time, n, bytes int, latencyMs float64) {
	if p == nil {
		return
	}
	ms := now.UnixMilli()
	p.mu.Lock()
	p.count += float64(n)
	p.bytes += float64(bytes)
	p.rate.record(ms, float64(n))
	p.byteRate.record(ms, float64(bytes))
	p.latLast, p.hasLatency = latencyMs, true
	p.latency.record(ms, latencyMs)
	p.mu.Unlock()
}

// SetLag sets the records between the partition's copy position and the
// source's end (the source consumer's records-lag).
func (p *Partition) SetLag(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.lag = float64(n)
	p.mu.Unlock()
}

// Checkpoint records that the target acknowledged a checkpoint of group for
// the remote topic's partition latencyMs after the checkpoint's timestamp
// (MM2's checkpoint-latency-ms).
func (e *Exporter) Checkpoint(source, target, group, remote string, partition int32, latencyMs float64) {
	if e == nil {
		return
	}
	now := e.now().UnixMilli()
	e.mu.Lock()
	defer e.mu.Unlock()
	k := cpKey{source, target, group, remote, partition}
	c := e.cps[k]
	if c == nil {
		c = &checkpointStat{}
		e.cps[k] = c
	}
	c.last = latencyMs
	c.latency.record(now, latencyMs)
}

// ForgetCheckpoints removes a group's checkpoint series in the flow
// source->target (every group's when group is ""): it is no longer
// checkpointed here.
func (e *Exporter) ForgetCheckpoints(source, target, group string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.cps {
		if k.source == source && k.target == target && (group == "" || k.group == group) {
			delete(e.cps, k)
		}
	}
}

// Describe sends nothing: the exporter is an unchecked collector, its
// series come and go with partitions and groups.
func (e *Exporter) Describe(chan<- *prometheus.Desc) {}

// Collect sends every series.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	now := e.now().UnixMilli()
	e.mu.Lock()
	tasks := make([]*Task, 0, len(e.tasks))
	for _, t := range e.tasks {
		tasks = append(tasks, t)
	}
	for k, c := range e.cps {
		labels := []string{"source", k.source, "target", k.target, "group", k.group, "topic", k.topic, "partition", itoa(k.partition)}
		lo, hi, avg := c.latency.stats(now)
		gauge(ch, checkpointPrefix+"checkpoint_latency_ms", c.last, labels...)
		gauge(ch, checkpointPrefix+"checkpoint_latency_ms_min", lo, labels...)
		gauge(ch, checkpointPrefix+"checkpoint_latency_ms_max", hi, labels...)
		gauge(ch, checkpointPrefix+"checkpoint_latency_ms_avg", avg, labels...)
	}
	e.mu.Unlock()
	for _, t := range tasks {
		t.collect(ch, now)
	}
	e.collectWorker(ch)
	collectRuntime(ch)
}

func (t *Task) collect(ch chan<- prometheus.Metric, now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	task := strconv.Itoa(t.task)
	consumer := quoted(t.source + "->" + t.target + "|MirrorSourceConnector-" + task + "|replication-consumer")
	var active, records, bytes float64
	for k, p := range t.parts {
		labels := []string{"source", t.source, "target", t.target, "topic", k.remote, "partition", itoa(k.partition)}
		p.mu.Lock()
		gauge(ch, sourcePrefix+"record_count", p.count, labels...)
		gauge(ch, sourcePrefix+"record_rate", p.rate.rate(now), labels...)
		gauge(ch, sourcePrefix+"byte_count", p.bytes, labels...)
		gauge(ch, sourcePrefix+"byte_rate", p.byteRate.rate(now), labels...)
		lastStats(ch, sourcePrefix+"record_age_ms", p.ageLast, p.hasAge, &p.age, now, labels)
		lastStats(ch, sourcePrefix+"replication_latency_ms", p.latLast, p.hasLatency, &p.latency, now, labels)
		gauge(ch, "kafka_consumer_fetch_manager_records_lag", p.lag,
			"clientid", consumer, "topic", p.topic, "partition", itoa(k.partition))
		records += p.count
		bytes += p.bytes
		p.mu.Unlock()
		if p.inflight != nil {
			active += float64(max(p.inflight.Load(), 0))
		}
	}
	connector := []string{"connector", quoted("MirrorSourceConnector"), "task", task, "source", t.source, "target", t.target}
	_, _, commitAvg := t.commits.stats(now)
	gauge(ch, "kafka_connect_connector_task_offset_commit_avg_time_ms", commitAvg, connector...)
	gauge(ch, "kafka_connect_source_task_source_record_active_count", active, connector...)
	// The bytes held for the producer: records in flight at the mean size
	// of those acknowledged so far (mm2go keeps no byte count of them).
	held := 0.0
	if records > 0 {
		held = active * bytes / records
	}
	gauge(ch, "kafka_producer_buffer_available_bytes", max(float64(t.bufferBytes)-held, 0),
		"clientid", quoted(t.source+"->"+t.target+"|connector-producer-MirrorSourceConnector-"+task))
}

// lastStats sends a value stat of MM2's (last value, -min, -max, -avg):
// the last value is NaN before anything was recorded.
func lastStats(ch chan<- prometheus.Metric, name string, last float64, has bool, w *window, now int64, labels []string) {
	if !has {
		last = math.NaN()
	}
	lo, hi, avg := w.stats(now)
	gauge(ch, name, last, labels...)
	gauge(ch, name+"_min", lo, labels...)
	gauge(ch, name+"_max", hi, labels...)
	gauge(ch, name+"_avg", avg, labels...)
}

// collectWorker sends the Connect worker and client series, from mm2go's
// own: each running flow that copies is MM2's three connectors (source,
// checkpoint, heartbeat), one that only emits heartbeats (a disabled flow
// MM2 runs for them) one; the source tasks on this instance are the
// worker's tasks, and a copying flow that runs no task here waits for its
// group (a rebalance).
func (e *Exporter) collectWorker(ch chan<- prometheus.Metric) {
	mfs, err := e.own.Gather()
	if err != nil && len(mfs) == 0 {
		return
	}
	flowsUp := map[string]bool{}
	tasks := map[string]float64{}
	copying := map[string]bool{} // flows with source tasks
	incoming := map[string]float64{}
	outgoing := map[string]float64{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "mm2go_flow_up":
			for _, m := range mf.GetMetric() {
				if m.GetGauge().GetValue() == 1 {
					flowsUp[label(m, "flow")] = true
				}
			}
		case "mm2go_flow_tasks":
			for _, m := range mf.GetMetric() {
				tasks[label(m, "flow")] += m.GetGauge().GetValue()
			}
		case "mm2go_flow_tasks_configured":
			for _, m := range mf.GetMetric() {
				copying[label(m, "flow")] = true
			}
		case "mm2go_kgo_read_bytes_total", "mm2go_kgo_write_bytes_total":
			for _, m := range mf.GetMetric() {
				id := label(m, "client_id")
				switch {
				case mf.GetName() == "mm2go_kgo_read_bytes_total" && strings.Contains(id, "consumer"):
					incoming[id] += m.GetCounter().GetValue()
				case mf.GetName() == "mm2go_kgo_write_bytes_total" && strings.Contains(id, "producer"):
					outgoing[id] += m.GetCounter().GetValue()
				}
			}
		}
	}
	var taskCount, connectors float64
	rebalancing := 0.0
	for flow := range flowsUp {
		if !copying[flow] {
			connectors++
			continue
		}
		connectors += 3
		taskCount += tasks[flow]
		if tasks[flow] == 0 {
			rebalancing = 1
		}
	}
	gauge(ch, "kafka_connect_worker_connector_count", connectors)
	gauge(ch, "kafka_connect_coordinator_assigned_connectors", connectors)
	gauge(ch, "kafka_connect_worker_task_count", taskCount)
	gauge(ch, "kafka_connect_coordinator_assigned_tasks", taskCount)
	gauge(ch, "kafka_connect_worker_rebalance_rebalancing", rebalancing)
	for id, v := range incoming {
		counter(ch, "kafka_consumer_incoming_byte_total", v, "clientid", quoted(id))
	}
	for id, v := range outgoing {
		counter(ch, "kafka_producer_outgoing_byte_total", v, "clientid", quoted(id))
	}
}

// runtimeSamples are the Go runtime's figures the JVM series are made of.
var runtimeSamples = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/total:bytes",
	"/cpu/classes/gc/total:cpu-seconds",
	"/gc/cycles/total:gc-cycles",
}

// collectRuntime sends the JVM series of the dashboard from the Go runtime:
// memory used (heap: live and unswept objects; nonheap: the rest the
// runtime holds), OS threads, and the CPU time of garbage collection.
func collectRuntime(ch chan<- prometheus.Metric) {
	s := make([]metrics.Sample, len(runtimeSamples))
	for i, name := range runtimeSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	value := func(i int) float64 {
		switch s[i].Value.Kind() {
		case metrics.KindUint64:
			return float64(s[i].Value.Uint64())
		case metrics.KindFloat64:
			return s[i].Value.Float64()
		}
		return math.NaN()
	}
	heap, total := value(0), value(1)
	gauge(ch, "jvm_memory_used_bytes", heap, "area", "heap")
	gauge(ch, "jvm_memory_used_bytes", total-heap, "area", "nonheap")
	threads, _ := runtime.ThreadCreateProfile(nil)
	gauge(ch, "jvm_threads_current", float64(threads))
	ch <- prometheus.MustNewConstSummary(
		prometheus.NewDesc("jvm_gc_collection_seconds", "Time spent in garbage collection (the Go runtime's GC CPU time).", []string{"gc"}, nil),
		uint64(value(3)), value(2), nil, "go")
}

func gauge(ch chan<- prometheus.Metric, name string, v float64, labels ...string) {
	send(ch, prometheus.GaugeValue, name, v, labels)
}

func counter(ch chan<- prometheus.Metric, name string, v float64, labels ...string) {
	send(ch, prometheus.CounterValue, name, v, labels)
}

// send sends one series; labels alternate names and values.
func send(ch chan<- prometheus.Metric, t prometheus.ValueType, name string, v float64, labels []string) {
	names := make([]string, 0, len(labels)/2)
	values := make([]string, 0, len(labels)/2)
	for i := 0; i+1 < len(labels); i += 2 {
		names = append(names, labels[i])
		values = append(values, labels[i+1])
	}
	desc := prometheus.NewDesc(name, "MirrorMaker 2's "+name+", computed by mm2go (--metrics.mm2-names).", names, nil)
	ch <- prometheus.MustNewConstMetric(desc, t, v, values...)
}

// quoted puts a value in double quotes, as JMX quotes MBean property
// values with special characters and the JMX exporter keeps them: Strimzi's
// dashboard matches client ids and connector names with the quotes.
func quoted(s string) string { return `"` + s + `"` }

func itoa(p int32) string { return strconv.Itoa(int(p)) }

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
