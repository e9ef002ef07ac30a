package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// prom is a real Prometheus server (Debian's prometheus package) that
// scrapes mm2go every second and evaluates rules every second.
type prom struct {
	t    *testing.T
	addr string
	dir  string
	log  *syncBuffer
}

// promTarget is one scrape target of job "mm2go" with extra labels.
type promTarget struct {
	addr   string
	labels map[string]string
}

// startPrometheus starts Prometheus with the given targets and rule files;
// it is stopped when the test ends. Its web port is one that was free a
// moment before: when another process took it meanwhile (Prometheus then
// exits with "address already in use"), it starts again on another, up to
// three times.
func startPrometheus(t *testing.T, targets []promTarget, rules ...string) *prom {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (apt-get install prometheus; .ci/run installs it)")
	}
	p := &prom{t: t, dir: t.TempDir()}
	p.writeConfig(targets, rules...)
	for attempt := 1; ; attempt++ {
		p.addr, p.log = freePort(t), &syncBuffer{}
		cmd := exec.Command(bin,
			"--config.file="+filepath.Join(p.dir, "prometheus.yml"),
			"--storage.tsdb.path="+filepath.Join(p.dir, "data"),
			"--web.listen-address="+p.addr,
			"--web.enable-lifecycle",
			"--log.level=warn")
		cmd.Stdout, cmd.Stderr = p.log, p.log
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-exited
		}
		if p.ready(exited, 30*time.Second) {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("prometheus log:\n%s", tail(p.log.String(), 4000))
				}
			})
			return p
		}
		stop()
		if attempt == 3 || !strings.Contains(p.log.String(), "address already in use") {
			t.Fatalf("prometheus not ready on %s within 30s; its log:\n%s", p.addr, tail(p.log.String(), 4000))
		}
		t.Logf("prometheus could not listen on %s (taken meanwhile); starting it on another port", p.addr)
	}
}

// ready waits up to limit for Prometheus to answer ready; false when it
// exited (exited closed) or did not answer in time.
func (p *prom) ready(exited <-chan struct{}, limit time.Duration) bool {
	// Each try bounded: a port taken by a process that accepts and never
	// answers would hold http.Get forever.
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if resp, err := client.Get("http://" + p.addr + "/-/ready"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		select {
		case <-exited:
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}

// writeConfig writes prometheus.yml: one job "mm2go", a second between
// scrapes and between rule evaluations.
func (p *prom) writeConfig(targets []promTarget, rules ...string) {
	var b strings.Builder
	b.WriteString("global: {scrape_interval: 1s, scrape_timeout: 900ms, evaluation_interval: 1s}\n")
	if len(rules) > 0 {
		b.WriteString("rule_files:\n")
		for _, r := range rules {
			fmt.Fprintf(&b, "  - %q\n", r)
		}
	}
	b.WriteString("scrape_configs:\n  - job_name: mm2go\n    static_configs:\n")
	for _, tg := range targets {
		fmt.Fprintf(&b, "      - targets: [%q]\n", tg.addr)
		if len(tg.labels) > 0 {
			b.WriteString("        labels:\n")
			for k, v := range tg.labels {
				fmt.Fprintf(&b, "          %s: %q\n", k, v)
			}
		}
	}
	require.NoError(p.t, os.WriteFile(filepath.Join(p.dir, "prometheus.yml"), []byte(b.String()), 0o644))
}

// promSeries is one series of a query's answer.
type promSeries struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
	Values [][2]any          `json:"values"`
}

func promValue(v any) float64 {
	f, _ := strconv.ParseFloat(fmt.Sprint(v), 64)
	return f
}

// api calls an HTTP API endpoint and returns its data.
func (p *prom) api(path string, q url.Values, data any) error {
	resp, err := http.Get("http://" + p.addr + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err
	}
	if body.Status != "success" {
		return fmt.Errorf("%s %v: %s", path, q, body.Error)
	}
	return json.Unmarshal(body.Data, data)
}

// query evaluates expr now.
func (p *prom) query(expr string) []promSeries {
	p.t.Helper()
	var d struct {
		Result []promSeries `json:"result"`
	}
	require.NoError(p.t, p.api("/api/v1/query", url.Values{"query": {expr}}, &d))
	return d.Result
}

// rawSamples returns the samples expr's series stored from since on, with
// the times of the evaluations or scrapes that wrote them.
func (p *prom) rawSamples(expr string, since time.Time) []promSeries {
	p.t.Helper()
	now := time.Now()
	window := int(now.Sub(since).Seconds()) + 1
	var d struct {
		Result []promSeries `json:"result"`
	}
	q := url.Values{"query": {fmt.Sprintf("%s[%ds]", expr, window)}, "time": {strconv.FormatFloat(float64(now.UnixMilli())/1000, 'f', 3, 64)}}
	require.NoError(p.t, p.api("/api/v1/query", q, &d))
	return d.Result
}

// queryRange evaluates expr every second from start to end.
func (p *prom) queryRange(expr string, start, end time.Time) []promSeries {
	p.t.Helper()
	var d struct {
		Result []promSeries `json:"result"`
	}
	q := url.Values{"query": {expr}, "start": {strconv.FormatInt(start.Unix(), 10)},
		"end": {strconv.FormatInt(end.Unix(), 10)}, "step": {"1"}}
	require.NoError(p.t, p.api("/api/v1/query_range", q, &d))
	return d.Result
}
