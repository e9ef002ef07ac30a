package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// alertScale is how much faster than the shipped rules the test's copy of
// them runs: a minute of theirs is alertScale of the test's.
const alertScale = 2 * time.Second

// scaledThresholds are the thresholds of the shipped rules that are
// durations in seconds, each with its count in the file; they are scaled
// like the rules' for: and range durations.
var scaledThresholds = map[string]int{
	"(mm2go_flow_cluster_unreachable_seconds) > 60": 1,
	"(mm2go_replicator_lag_seconds) > 300":          1,
	"(mm2go_checkpoint_age_seconds) > 900":          1,
	"mm2go_heartbeat_last_timestamp_seconds > 120":  1,
}

// scaleRules writes deploy/prometheus/alerts.yml with every duration (for:,
// range selectors and the thresholds in seconds) scaled by alertScale per
// minute, and returns its path and each alert's for: after scaling. A rule
// with a duration the test does not know how to scale fails the test.
func scaleRules(t *testing.T) (string, map[string]time.Duration) {
	t.Helper()
	data, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	require.NoError(t, err)
	s := string(data)
	perMinute := alertScale.Seconds()
	for th, n := range scaledThresholds {
		require.Equal(t, n, strings.Count(s, th), "threshold %q in alerts.yml: update the test's scaling", th)
		i := strings.LastIndex(th, "> ")
		v, err := strconv.ParseFloat(th[i+2:], 64)
		require.NoError(t, err)
		s = strings.ReplaceAll(s, th, th[:i+2]+strconv.FormatFloat(v/60*perMinute, 'f', -1, 64))
	}
	minutes := regexp.MustCompile(`(for: |\[)(\d+)m\b`)
	s = minutes.ReplaceAllStringFunc(s, func(m string) string {
		sub := minutes.FindStringSubmatch(m)
		n, _ := strconv.Atoi(sub[2])
		return sub[1] + strconv.FormatFloat(float64(n)*perMinute, 'f', -1, 64) + "s"
	})
	require.NotRegexp(t, `(for: |\[)\d+[hmd]`, s, "a duration the test does not scale")
	fors := map[string]time.Duration{}
	var name string
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "- alert: "); ok {
			name = v
			fors[name] = 0
		}
		if v, ok := strings.CutPrefix(line, "for: "); ok {
			d, err := time.ParseDuration(v)
			require.NoError(t, err)
			fors[name] = d
		}
	}
	path := filepath.Join(t.TempDir(), "alerts.yml")
	require.NoError(t, os.WriteFile(path, []byte(s), 0o644))
	return path, fors
}

// promAlert is one alert of /api/v1/alerts.
type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// firing returns the firing alerts by name, each with the flows (or
// instances) it fires for.
func (p *prom) firing() map[string][]string { return p.alerts("firing") }

// alerts returns the alerts in one of states (firing, pending) by name,
// each with the flows (or instances) it is active for.
func (p *prom) alerts(states ...string) map[string][]string {
	p.t.Helper()
	var d struct {
		Alerts []promAlert `json:"alerts"`
	}
	require.NoError(p.t, p.api("/api/v1/alerts", nil, &d))
	out := map[string][]string{}
	for _, a := range d.Alerts {
		if slices.Contains(states, a.State) {
			out[a.Labels["alertname"]] = append(out[a.Labels["alertname"]], a.Labels["flow"])
		}
	}
	return out
}

// reload makes Prometheus read a new configuration.
func (p *prom) reload(targets []promTarget, rules ...string) {
	p.writeConfig(targets, rules...)
	resp, err := http.Post("http://"+p.addr+"/-/reload", "", nil)
	require.NoError(p.t, err)
	_ = resp.Body.Close()
	require.Equal(p.t, http.StatusOK, resp.StatusCode, "reload prometheus")
}

// alertWatch waits for alerts to fire and to resolve, and logs how long
// each took against its rule's for:.
type alertWatch struct {
	t    *testing.T
	p    *prom
	fors map[string]time.Duration
}

// fire waits until every alert of want fires for its flow: "" for any,
// "->B" for any flow to B.
func (w *alertWatch) fire(since time.Time, timeout time.Duration, want map[string]string) {
	w.t.Helper()
	w.wait(since, timeout, want, true)
}

// resolve waits until no alert of want fires any more.
func (w *alertWatch) resolve(since time.Time, timeout time.Duration, want map[string]string) {
	w.t.Helper()
	w.wait(since, timeout, want, false)
}

// checkTimely checks, from begin on, that each alert fired and that each
// of its firing runs began at the first rule evaluation at which its
// condition had held for its rule's for:. It reads Prometheus's raw
// samples: ALERTS_FOR_STATE, written at every evaluation while an alert is
// pending or firing, carries when its condition began to hold (to the
// second), and ALERTS when it fired. Raw samples, not a range query's
// steps, so that a pause in Prometheus's own evaluations (a loaded machine)
// shows as the gap it is and is not taken for a late alert: once, on CI, a
// step-filled pending run of 35 s had preceded a firing with for: 4s.
func (w *alertWatch) checkTimely(begin time.Time) {
	w.t.Helper()
	var worst, paused time.Duration
	defer func() {
		w.t.Logf("every alert fired at most %s after its condition held plus its for:; Prometheus paused its evaluations for up to %s", worst, paused)
	}()
	for name, forDur := range w.fors {
		firing := w.p.rawSamples(`ALERTS{alertname="`+name+`",alertstate="firing"}`, begin)
		require.NotEmpty(w.t, firing, "%s never fired", name)
		if forDur == 0 {
			continue // fires at the first evaluation that finds it: nothing to time
		}
		// Per series, the evaluations while active, in time order.
		evals := map[string][]alertEval{}
		for _, s := range w.p.rawSamples(`ALERTS_FOR_STATE{alertname="`+name+`"}`, begin) {
			k := seriesKey(s.Metric)
			for _, v := range s.Values {
				evals[k] = append(evals[k], alertEval{at: promValue(v[0]), since: promValue(v[1])})
			}
		}
		for _, s := range firing {
			ev := evals[seriesKey(s.Metric)]
			sinceAt := make(map[float64]float64, len(ev)) // by evaluation
			for _, e := range ev {
				sinceAt[e.at] = e.since
			}
			last := -1.0
			for _, fired := range sampleTimes(s) {
				since := sinceAt[fired]
				if since == last {
					continue // the same firing run
				}
				last = since
				require.NotZero(w.t, since, "%s %v: no evaluation with its for: state at %v", name, s.Metric, fired)
				// When its condition began to hold: an evaluation, in the
				// second since names, at the phase every evaluation of the
				// group has (Prometheus writes no state at its first
				// evaluations, so the run's first sample may be later). And
				// the last evaluation before it fired.
				first := since + fired - math.Floor(fired)
				prev := 0.0
				for _, e := range ev {
					if e.since == since && e.at < fired {
						prev = max(prev, e.at)
					}
				}
				if first < float64(begin.UnixMilli())/1000 {
					continue // began before the window
				}
				require.NotZero(w.t, prev, "%s %v: no pending state found before it fired", name, s.Metric)
				took := secs(fired - first)
				require.GreaterOrEqual(w.t, took, forDur, "%s %v fired %s after its condition held (for: %s)", name, s.Metric, took, forDur)
				require.Less(w.t, secs(prev-first), forDur, "%s %v was due at %s after its condition held and fired only %s after (for: %s)",
					name, s.Metric, secs(prev-first), took, forDur)
				worst, paused = max(worst, took-forDur), max(paused, secs(fired-prev))
			}
		}
	}
}

// alertEval is an evaluation that found an alert active: when, and since
// when its condition held (ALERTS_FOR_STATE's value), Unix seconds.
type alertEval struct{ at, since float64 }

// secs is a duration of s seconds, to the millisecond (Prometheus's
// timestamps' resolution).
func secs(s float64) time.Duration { return time.Duration(math.Round(s*1000)) * time.Millisecond }

// seriesKey identifies a series of ALERTS by its labels but the state.
func seriesKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if k != "alertstate" && k != "__name__" {
			keys = append(keys, k+"="+v)
		}
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// sampleTimes returns the times of a range answer's samples, Unix seconds.
func sampleTimes(s promSeries) []float64 {
	out := make([]float64, len(s.Values))
	for i, v := range s.Values {
		out[i] = promValue(v[0])
	}
	return out
}

func (w *alertWatch) wait(since time.Time, timeout time.Duration, want map[string]string, firing bool) {
	w.t.Helper()
	left := map[string]string{}
	for k, v := range want {
		left[k] = v
	}
	deadline := time.Now().Add(timeout)
	for len(left) > 0 {
		now := w.p.firing()
		for name, flow := range left {
			fires := false
			for _, f := range now[name] {
				fires = fires || flow == "" || f == flow || strings.HasPrefix(flow, "->") && strings.HasSuffix(f, flow)
			}
			if fires == firing {
				verb := "resolved"
				if firing {
					verb = "fired"
				}
				w.t.Logf("%s %s after %.1f s (for: %s)", name, verb, time.Since(since).Seconds(), w.fors[name])
				delete(left, name)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			names := make([]string, 0, len(left))
			for n := range left {
				names = append(names, n)
			}
			sort.Strings(names)
			w.t.Fatalf("within %s, these alerts did not %s: %v (firing: %v)", timeout, map[bool]string{true: "fire", false: "resolve"}[firing], names, now)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestIntegrationAlerts loads the shipped alert rules into a real
// Prometheus, time-scaled (a minute of the rules is two seconds here),
// scrapes mm2go on real Kafka, induces the faults the rules describe and
// sees each alert fire, then resolve after the fault is removed.
//
// Faults, all at once: a cluster stopped, the target of one flow (while a
// producer writes to its source topic, whose records are then deleted
// before they could be copied) and the source of another (with a consumer
// group); a record larger than its remote topic accepts; a source topic
// recreated under its copy; a flow added by a reload whose source does not
// answer; a second mm2go whose checkpointer an ACL keeps from its topic,
// and which keeps too little history for a topic written in transactions.
// Then, one by one: a file that fails to reload and mm2go stopped
// (SIGSTOP). No mm2go scraped at all is the first fault, while the test
// sets up.
func TestIntegrationAlerts(t *testing.T) { firstPassOnly(testAlerts)(t) }

func testAlerts(t *testing.T) {
	t.Parallel() // mostly waiting: it runs beside the other parallel tests
	e := newEnv(t)
	// Prometheus starts with no target: the first alert to fire, while
	// the test sets up, is that no mm2go is scraped at all.
	rules, fors := scaleRules(t)
	begin := time.Now()
	p := startPrometheus(t, nil, rules)
	w := &alertWatch{t: t, p: p, fors: fors}
	eventually(t, 30*time.Second, "the rules loaded", func() bool {
		var r struct {
			Groups []struct {
				Rules []any `json:"rules"`
			} `json:"groups"`
		}
		return p.api("/api/v1/rules", nil, &r) == nil && len(r.Groups) == 1 && len(r.Groups[0].Rules) == len(fors)
	})
	d := ownCluster(t, "alerts", "")
	dAlias := "d" + e.id
	outTopic, bigTopic, recTopic := e.topic("out"), e.topic("big"), e.topic("rec")
	e.createTopic(outTopic, 2, nil)
	e.createTopic(bigTopic, 1, nil)
	e.createTopic(recTopic, 1, nil)
	group := "g" + e.id
	var seq int
	produceN(t, e.srcCl, []string{outTopic, bigTopic, recTopic}, 1, 30, &seq)
	offs := make(kadm.Offsets)
	offs.AddOffset(outTopic, 0, 5, -1)
	_, err := e.srcAdm.CommitOffsets(e.ctx(), group, offs)
	require.NoError(t, err)
	// D is also the source of a flow, with a group of its own.
	dTopic, dGroup := e.topic("d"), "gd"+e.id
	dCl, err := kgo.NewClient(kgo.SeedBrokers(d.bootstrap))
	require.NoError(t, err)
	dAdm := kadm.NewClient(dCl)
	createTopicOn(t, dAdm, dTopic, 1, nil)
	produceN(t, dCl, []string{dTopic}, 1, 10, &seq)
	offs = make(kadm.Offsets)
	offs.AddOffset(dTopic, 0, 4, -1)
	_, err = dAdm.CommitOffsets(e.ctx(), dGroup, offs)
	require.NoError(t, err)
	dCl.Close()

	lines := func(clusters string) []string {
		return []string{
			"clusters = " + clusters,
			dAlias + ".bootstrap.servers = " + d.bootstrap,
			dAlias + ".offset.storage.replication.factor = 1",
			e.src + "->" + dAlias + ".enabled = true",
			e.src + "->" + dAlias + ".topics = " + outTopic,
			e.src + "->" + e.dst + ".topics = " + bigTopic + "," + recTopic,
			e.src + "->" + e.dst + ".sync.topic.configs.enabled = false",
			dAlias + "->" + e.src + ".enabled = false",
			dAlias + "->" + e.dst + ".enabled = true",
			dAlias + "->" + e.dst + ".topics = " + dTopic,
			dAlias + "->" + e.dst + ".groups = " + dGroup,
			e.dst + "->" + dAlias + ".enabled = false",
			"emit.checkpoints.interval.seconds = 1",
			"refresh.groups.interval.seconds = 1",
			"groups = " + group,
			fencingLine(),
		}
	}
	dead, deadAddr := "x"+e.id, freePort(t) // a cluster that does not answer, in a flow added by a reload
	conf := func(withDead bool) string {
		clusters := e.src + ", " + e.dst + ", " + dAlias
		var more []string
		if withDead {
			clusters += ", " + dead
			more = []string{dead + ".bootstrap.servers = " + deadAddr, dead + "->" + e.dst + ".enabled = true"}
			for _, other := range []string{e.src, dAlias} {
				more = append(more, dead+"->"+other+".enabled = false", other+"->"+dead+".enabled = false")
			}
			more = append(more, e.dst+"->"+dead+".enabled = false")
		}
		return e.config(append(lines(clusters), more...)...)
	}
	addr := freePort(t)
	mm := e.start("-c", conf(false), "--web.listen-address", addr, "--lag-interval", "1s")
	pd, ps, ds := e.src+"->"+dAlias, e.src+"->"+e.dst, dAlias+"->"+e.dst
	eventually(t, time.Minute, "the flows copying and checkpointing", func() bool {
		return records(t, e.dstAdm, e.remote(bigTopic)) == 10 && records(t, e.dstAdm, e.remote(recTopic)) == 10 &&
			records(t, e.dstAdm, dAlias+"."+dTopic) == 10 && scrape(t, addr, `mm2go_checkpoint_checkpoints_total{flow="`+ds+`"}`) > 0 &&
			scrape(t, addr, `mm2go_replicator_lag_records{flow="`+pd+`",task="0",topic="`+outTopic+`"}`) == 0
	})

	target := []promTarget{{addr: addr}}

	// A second mm2go, B, copies a topic written in transactions to q, an
	// ACL-enforcing cluster (primary3), keeping 2 segments of exact history
	// per partition: its checkpointer cannot create its checkpoints topic
	// while an ACL denies it, and once it can, the transaction markers make
	// more segments than it keeps (the translations turn approximate).
	q, txTopic := "q"+e.id, e.topic("tx")
	sq := e.src + "->" + q
	qCl, err := kgo.NewClient(kgo.SeedBrokers(source3Seeds...))
	require.NoError(t, err)
	defer qCl.Close()
	qAdm := kadm.NewClient(qCl)
	e.createTopic(txTopic, 1, nil)
	tx := newProducerClient(t, sourceSeeds, "tx"+e.id)
	for i := range 6 {
		require.NoError(t, tx.BeginTransaction())
		for j := range 3 {
			require.NoError(t, tx.ProduceSync(e.ctx(), &kgo.Record{Topic: txTopic, Value: []byte(fmt.Sprintf("tx-%d-%d", i, j))}).FirstErr())
		}
		require.NoError(t, tx.EndTransaction(e.ctx(), kgo.TryCommit))
	}
	cpTopic := e.src + ".checkpoints.internal"
	scACL(t, qAdm, cpTopic, kadm.ACLPatternLiteral, "User:*", kadm.OpAll, false)
	bFile := filepath.Join(t.TempDir(), "b.properties")
	require.NoError(t, os.WriteFile(bFile, []byte(strings.Join([]string{
		"clusters = " + e.src + ", " + q,
		copyModeLine(e.src, q),
		e.src + ".bootstrap.servers = " + strings.Join(sourceSeeds, ","),
		q + ".bootstrap.servers = " + strings.Join(source3Seeds, ","),
		sq + ".enabled = true",
		sq + ".topics = " + txTopic,
		q + "->" + e.src + ".enabled = false",
		"replication.factor = 1", "offset-syncs.topic.replication.factor = 1", "checkpoints.topic.replication.factor = 1",
		q + ".offset.storage.replication.factor = 1", q + ".offset.flush.interval.ms = 500",
		"emit.heartbeats.enabled = false", "refresh.topics.interval.seconds = 1",
		"emit.checkpoints.interval.seconds = 1", "refresh.groups.interval.seconds = 1",
		// Scaled like the rules: each failed start of the checkpointer
		// takes this long (a minute by default).
		"admin.timeout.ms = 3000",
		fencingLine(),
	}, "\n")+"\n"), 0o600))
	bAddr := freePort(t)
	startB := func(extra ...string) *proc {
		return e.start(append([]string{"-c", bFile, "--web.listen-address", bAddr, "--lag-interval", "1s", "--instance-id", "b" + e.id}, extra...)...)
	}
	defer func() { // the ACL is removed below; not when the test failed before
		_, _ = qAdm.DeleteACLs(context.Background(), kadm.NewACLs().Topics(cpTopic).ResourcePatternType(kadm.ACLPatternLiteral).
			Deny("User:*").DenyHosts("*").Operations(kadm.OpAll))
	}()
	w.fire(begin, time.Minute, map[string]string{"MM2GoAbsent": ""})
	found := time.Now()
	p.reload(target, rules)
	w.resolve(found, time.Minute, map[string]string{"MM2GoAbsent": ""})
	// Healthy: no rule's condition holds. Pending counts too: a rule
	// with a for: longer than this wait would not fire in it, but its
	// condition shows as pending from the first evaluation (every second).
	time.Sleep(5 * alertScale)
	require.Empty(t, p.alerts("firing", "pending"), "alerts firing or pending while all is well")

	// The faults.
	start := time.Now()
	stopProducing := produceEvery(e.srcCl, outTopic, 2, 10, 100*time.Millisecond, 1_000_000)
	d.run("term", "1")
	mmB := startB("--checkpoint.max-segments", "2")
	targets := append(target, promTarget{addr: bAddr})
	p.reload(targets, rules)
	// A record the remote topic refuses.
	setTopicConfig(t, e.dstAdm, e.remote(bigTopic), "max.message.bytes", "2000")
	big := make([]byte, 20_000) // random: compressed, it still does not fit
	_, _ = rand.Read(big)
	require.NoError(t, e.srcCl.ProduceSync(e.ctx(), &kgo.Record{Topic: bigTopic, Value: big}).FirstErr())
	// The source topic recreated with new records.
	_, err = e.srcAdm.DeleteTopics(e.ctx(), recTopic)
	require.NoError(t, err)
	eventually(t, 30*time.Second, "the topic recreated", func() bool {
		_, err := e.srcAdm.CreateTopic(e.ctx(), 1, 1, nil, recTopic)
		return err == nil
	})
	fresh, err := kgo.NewClient(kgo.SeedBrokers(sourceSeeds...)) // knows the new topic ID
	require.NoError(t, err)
	produceN(t, fresh, []string{recTopic}, 1, 5, &seq)
	fresh.Close()
	// A flow whose source does not answer.
	conf(true)
	require.NoError(t, mm.cmd.Process.Signal(syscall.SIGHUP))
	xd := dead + "->" + e.dst

	fired := map[string]string{
		"MM2GoClusterUnreachable":  pd,
		"MM2GoTasksWithoutOwner":   pd,
		"MM2GoReplicationStalled":  pd,
		"MM2GoLagHigh":             pd,
		"MM2GoHeartbeatsStale":     "->" + dAlias,
		"MM2GoBrokerConnectErrors": "",
		"MM2GoPartitionsStalled":   ps,
		"MM2GoReplicationErrors":   ps,
		"MM2GoPartitionsBlocked":   ps,
		"MM2GoFlowRestarted":       xd,
		"MM2GoFlowFailing":         xd,
		"MM2GoCheckpointsStale":    ds,
		"MM2GoWorkerRestarting":    sq,
		"MM2GoTranslationDegraded": sq,
	}
	// B's checkpointer gets its topic once it is seen failing, and then
	// keeps too little history (while the other faults last).
	w.fire(start, time.Minute, map[string]string{"MM2GoWorkerRestarting": sq})
	_, err = qAdm.DeleteACLs(e.ctx(), kadm.NewACLs().Topics(cpTopic).ResourcePatternType(kadm.ACLPatternLiteral).
		Deny("User:*").DenyHosts("*").Operations(kadm.OpAll))
	require.NoError(t, err)
	w.fire(start, 3*time.Minute, fired)
	t.Logf("firing with the faults: %v", p.firing())
	// Records removed from the source before they were copied.
	ends, err := e.srcAdm.ListEndOffsets(e.ctx(), outTopic)
	require.NoError(t, err)
	_, err = e.srcAdm.DeleteRecords(e.ctx(), ends.Offsets())
	require.NoError(t, err)

	// The faults removed.
	fixed := time.Now()
	require.NoError(t, stopProducing())
	d.run("restart-node", "1")
	setTopicConfig(t, e.dstAdm, e.remote(bigTopic), "max.message.bytes", "1000000")
	_, err = e.dstAdm.DeleteTopics(e.ctx(), e.remote(recTopic))
	require.NoError(t, err)
	conf(false)
	require.NoError(t, mm.cmd.Process.Signal(syscall.SIGHUP))
	// B keeps the whole history again once started with the default bound.
	require.Zero(t, mmB.stop(t, syscall.SIGTERM, 30*time.Second))
	mmB = startB()
	w.fire(fixed, 2*time.Minute, map[string]string{"MM2GoSourceRecordsLost": pd})
	fired["MM2GoSourceRecordsLost"] = pd
	w.resolve(fixed, 3*time.Minute, fired)

	// A file that does not load.
	bad := time.Now()
	cfg := conf(false)
	require.NoError(t, os.WriteFile(cfg, []byte("clusters = "+e.src+"\n"+e.src+"->nowhere.enabled = true\n"), 0o600))
	require.NoError(t, mm.cmd.Process.Signal(syscall.SIGHUP))
	w.fire(bad, time.Minute, map[string]string{"MM2GoConfigReloadFailed": ""})
	conf(false)
	require.NoError(t, mm.cmd.Process.Signal(syscall.SIGHUP))
	w.resolve(bad, time.Minute, map[string]string{"MM2GoConfigReloadFailed": ""})

	// mm2go stopped.
	frozen := time.Now()
	require.NoError(t, mm.cmd.Process.Signal(syscall.SIGSTOP))
	w.fire(frozen, time.Minute, map[string]string{"MM2GoDown": ""})
	require.NoError(t, mm.cmd.Process.Signal(syscall.SIGCONT))
	w.resolve(frozen, time.Minute, map[string]string{"MM2GoDown": ""})
	require.Zero(t, mm.stop(t, syscall.SIGTERM, 30*time.Second))
	require.Zero(t, mmB.stop(t, syscall.SIGTERM, 30*time.Second))
	w.checkTimely(begin)
}
