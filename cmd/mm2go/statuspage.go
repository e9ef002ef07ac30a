package main

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/checkpoint"
	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/replicator"
)

// The status page at / of the web listener: per flow, what this instance
// copies and how far behind it is, how offsets were translated, the
// partitions the target refused, and per consumer group whether its
// consumers can be switched to the target now (the failover check). Server
// rendered, no script, plain tables: it reads in a terminal browser too.

// statusCheckTimeout bounds the failover check of one flow on the page.
const statusCheckTimeout = 10 * time.Second

type statusView struct {
	Instance, Version string
	Now               string
	Flows             []flowView
}

type flowView struct {
	Name, State    string
	OK             bool
	Tasks          string
	Topics         []topicView
	Modes          []modeView
	Errors         []replicator.PartitionError
	Groups         []groupView
	GroupsNote     string
	HeartbeatsOnly bool
}

type topicView struct {
	Topic      string
	Lag        int64
	LagSeconds float64
}

type modeView struct {
	Mode  string
	Count int64
}

type groupView struct {
	Group string
	Safe  bool
	Why   string
}

// statusPage serves GET / (only /: other paths are 404).
func (d *daemon) statusPage(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/" {
		http.NotFound(w, req)
		return
	}
	v := statusView{Instance: d.o.InstanceID, Version: version, Now: time.Now().UTC().Format(time.RFC3339)}
	figures := d.figures()
	d.mu.Lock()
	frs := make([]*flowRunner, 0, len(d.flows))
	for _, h := range d.flows {
		frs = append(frs, h.fr)
	}
	d.mu.Unlock()
	slices.SortFunc(frs, func(a, b *flowRunner) int { return strings.Compare(a.flow.Name(), b.flow.Name()) })
	for _, fr := range frs {
		v.Flows = append(v.Flows, d.flowStatus(req.Context(), fr, figures[fr.flow.Name()]))
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := statusTemplate.Execute(w, v); err != nil {
		d.log.Debug("status page", zap.Error(err))
	}
}

// flowFigures are a flow's figures as /metrics exports them.
type flowFigures struct {
	tasks, configured float64
	lag               map[string]int64
	lagSeconds        map[string]float64
	modes             map[string]int64
}

// figures reads the flows' lag, tasks and translation counts from the
// registry, the numbers /metrics shows (lag of a task taken from this
// instance included).
func (d *daemon) figures() map[string]*flowFigures {
	out := map[string]*flowFigures{}
	of := func(flow string) *flowFigures {
		f := out[flow]
		if f == nil {
			f = &flowFigures{lag: map[string]int64{}, lagSeconds: map[string]float64{}, modes: map[string]int64{}}
			out[flow] = f
		}
		return f
	}
	mfs, err := d.o.Registry.Gather()
	if err != nil && len(mfs) == 0 {
		return out
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			f := of(labels["flow"])
			switch mf.GetName() {
			case "mm2go_flow_tasks":
				f.tasks += m.GetGauge().GetValue()
			case "mm2go_flow_tasks_configured":
				f.configured = max(f.configured, m.GetGauge().GetValue())
			case "mm2go_replicator_lag_records":
				f.lag[labels["topic"]] += int64(m.GetGauge().GetValue())
			case "mm2go_replicator_lag_seconds":
				f.lagSeconds[labels["topic"]] = max(f.lagSeconds[labels["topic"]], m.GetGauge().GetValue())
			case "mm2go_checkpoint_translations_total":
				f.modes[labels["mode"]] += int64(m.GetCounter().GetValue())
			}
		}
	}
	return out
}

// flowStatus assembles one flow's part of the page.
func (d *daemon) flowStatus(ctx context.Context, fr *flowRunner, fig *flowFigures) flowView {
	name := fr.flow.Name()
	v := flowView{Name: name, HeartbeatsOnly: !fr.flow.Enabled}
	if fig == nil {
		fig = &flowFigures{}
	}
	switch why := fr.unreachable(d.o.UnreachableAfter); {
	case !d.m.isUp(name):
		v.State = "down (restarting; see the log)"
	case why != "":
		v.State = why
	case v.HeartbeatsOnly:
		v.State, v.OK = "emitting heartbeats", true
	case fr.standingBy():
		v.State, v.OK = "standing by: other instances run its tasks", true
	default:
		v.State, v.OK = "copying", true
	}
	if v.HeartbeatsOnly {
		return v
	}
	v.Tasks = fmt.Sprintf("%g of %g", fig.tasks, fig.configured)
	for t, lag := range fig.lag {
		v.Topics = append(v.Topics, topicView{Topic: t, Lag: lag, LagSeconds: fig.lagSeconds[t]})
	}
	slices.SortFunc(v.Topics, func(a, b topicView) int { return strings.Compare(a.Topic, b.Topic) })
	for m, n := range fig.modes {
		v.Modes = append(v.Modes, modeView{Mode: m, Count: n})
	}
	slices.SortFunc(v.Modes, func(a, b modeView) int { return strings.Compare(a.Mode, b.Mode) })
	v.Errors = fr.partitionErrors()
	stalled := 0
	for _, e := range v.Errors {
		if e.Stalled {
			stalled++
		}
	}
	if stalled > 0 && v.OK {
		v.State, v.OK = fmt.Sprintf("%s, %d partition(s) stalled", v.State, stalled), false
	}
	v.Groups, v.GroupsNote = fr.switchable(ctx)
	return v
}

// partitionErrors returns the last refusal of each partition the flow's
// tasks on this instance copy.
func (fr *flowRunner) partitionErrors() []replicator.PartitionError {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	var out []replicator.PartitionError
	for _, rep := range fr.reps {
		out = append(out, rep.PartitionErrors()...)
	}
	return out
}

// switchable runs the failover check on every group the flow checkpoints,
// or says why it could not.
func (fr *flowRunner) switchable(ctx context.Context) ([]groupView, string) {
	srcAdm := fr.probeSrc.Load()
	if srcAdm == nil {
		return nil, "the flow's source is not probed yet on this instance"
	}
	ctx, cancel := context.WithTimeout(ctx, statusCheckTimeout)
	defer cancel()
	f := fr.flow
	// A gap of the offset map the reader could not read counts as other
	// producers' records; the API logs it, the page (reloaded every 10 s)
	// does not.
	idx, sel, _, err := fr.readIndex(ctx, "status")
	if err != nil {
		return nil, err.Error()
	}
	groups, err := flowGroups(ctx, srcAdm, f, sel)
	if err != nil {
		return nil, "list the source's groups: " + err.Error()
	}
	if len(groups) == 0 {
		return nil, "no consumer group of the replicated topics matches the flow's groups"
	}
	tgt, err := fr.client(config.RoleTargetAdmin, kgo.ClientID(f.Client(config.RoleTargetAdmin).ID+"-status"))
	if err != nil {
		return nil, err.Error()
	}
	defer tgt.Close()
	rep, err := checkpoint.Check(ctx, srcAdm, kadm.NewClient(tgt), idx, sel, f.Source, groups,
		checkpoint.CheckOptions{ReadCommitted: f.SourceIsolationLevel == config.ReadCommitted})
	if err != nil {
		return nil, "failover check: " + err.Error()
	}
	out := make([]groupView, 0, len(rep.Groups))
	for _, g := range rep.Groups {
		out = append(out, groupView{Group: g.Group, Safe: len(g.Failures) == 0, Why: whyNotSafe(g.Failures)})
	}
	return out, ""
}

// whyNotSafe says in a line why a group cannot switch yet: replication
// behind first (by how many records), else the first failure.
func whyNotSafe(fs []checkpoint.Failure) string {
	if len(fs) == 0 {
		return "safe to switch"
	}
	var behind int64
	for _, f := range fs {
		if f.Reason == checkpoint.ReasonReplicationBehind {
			behind += f.Behind
		}
	}
	if behind > 0 {
		return fmt.Sprintf("not safe: replication behind by %d records", behind)
	}
	f := fs[0]
	where := ""
	if f.Topic != "" {
		where = fmt.Sprintf(" (%s-%d)", f.Topic, f.Partition)
	}
	return "not safe: " + strings.ReplaceAll(string(f.Reason), "_", " ") + where + ": " + f.Detail
}

var statusTemplate = template.Must(template.New("status").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="10">
<title>mm2go status</title>
<style>
body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: left; }
td.n { text-align: right; }
.ok { color: #176117; } .bad { color: #a01010; font-weight: bold; }
</style>
</head>
<body>
<h1>mm2go status</h1>
<p>Instance {{.Instance}}, version {{.Version}}, at {{.Now}}. This page refreshes every 10 s; the same figures are on /metrics.</p>
{{range .Flows}}
<h2>Flow {{.Name}}: <span class="{{if .OK}}ok{{else}}bad{{end}}">{{.State}}</span></h2>
{{if not .HeartbeatsOnly}}
<p>Tasks on this instance: {{.Tasks}}.</p>
<h3>Lag per topic</h3>
{{if .Topics}}<table>
<tr><th>source topic</th><th>lag (records)</th><th>oldest uncopied record (s)</th></tr>
{{range .Topics}}<tr><td>{{.Topic}}</td><td class="n">{{.Lag}}</td><td class="n">{{printf "%.1f" .LagSeconds}}</td></tr>
{{end}}</table>{{else}}<p>No topic copied on this instance.</p>{{end}}
<h3>Partitions the target refused</h3>
{{if .Errors}}<table>
<tr><th>source partition</th><th>remote topic</th><th>offset</th><th>reason</th><th>state</th><th>at</th><th>error</th></tr>
{{range .Errors}}<tr><td>{{.Topic}}-{{.Partition}}</td><td>{{.RemoteTopic}}</td><td class="n">{{.Offset}}</td><td>{{.Reason}}</td><td>{{if .Stalled}}<span class="bad">stalled, retried</span>{{else}}copying again{{end}}</td><td>{{.At.UTC.Format "15:04:05"}}</td><td>{{.Err}}</td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
<h3>Offset translations</h3>
{{if .Modes}}<table>
<tr><th>mode</th><th>translations</th></tr>
{{range .Modes}}<tr><td>{{.Mode}}</td><td class="n">{{.Count}}</td></tr>
{{end}}</table>{{else}}<p>None yet.</p>{{end}}
<h3>Consumer groups: switch to the target now?</h3>
{{if .Groups}}<table>
<tr><th>group</th><th>answer</th></tr>
{{range .Groups}}<tr><td>{{.Group}}</td><td class="{{if .Safe}}ok{{else}}bad{{end}}">{{.Why}}</td></tr>
{{end}}</table>{{else}}<p>{{.GroupsNote}}</p>{{end}}
{{end}}
{{end}}
</body>
</html>
`))
