package e2e

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
)

// eventOnly are the metrics of the dashboard and the alert rules that
// exist only once something went wrong (errors, losses, skipped syncs,
// broken connections). cmd/mm2go's TestDeploy provokes each of them with
// injected faults; here, against healthy real brokers, they may be absent.
var eventOnly = map[string]bool{
	"mm2go_checkpoint_errors_total":                true,
	"mm2go_checkpoint_group_offsets_skipped_total": true,
	"mm2go_heartbeat_errors_total":                 true,
	"mm2go_kgo_connect_errors_total":               true,
	"mm2go_kgo_disconnects_total":                  true,
	"mm2go_kgo_read_errors_total":                  true,
	"mm2go_kgo_write_errors_total":                 true,
	"mm2go_replicator_errors_total":                true,
	"mm2go_replicator_source_records_lost_total":   true,
}

// TestIntegrationMetrics runs mm2go on real Kafka with a replicated topic
// and a consumer group, and checks that every metric the shipped dashboard
// and alert rules use is exported (apart from the event-only ones).
func TestIntegrationMetrics(t *testing.T) {
	beside(t)
	e := newEnv(t)
	topic := e.topic("m")
	e.createTopic(topic, 2, nil)
	var seq int
	produceN(t, e.srcCl, []string{topic}, 2, 100, &seq)
	ctx := e.ctx()
	offs := make(kadm.Offsets)
	offs.AddOffset(topic, 0, 30, -1)
	offs.AddOffset(topic, 1, 20, -1)
	_, err := e.srcAdm.CommitOffsets(ctx, "g"+e.id, offs)
	require.NoError(t, err)

	addr := freePort(t)
	e.start("-c", e.config(
		"emit.checkpoints.interval.seconds = 1",
		"refresh.groups.interval.seconds = 1",
		"sync.group.offsets.enabled = true",
		"sync.group.offsets.interval.seconds = 1",
	), "--web.listen-address", addr)
	eventually(t, time.Minute, "records copied and a checkpoint written", func() bool {
		return scrape(t, addr, `mm2go_replicator_records_total{flow="`+e.src+`->`+e.dst+`",topic="`+topic+`"}`) == 100 &&
			scrape(t, addr, `mm2go_checkpoint_checkpoints_total{flow="`+e.src+`->`+e.dst+`"}`) >= 2
	})
	used := make(map[string]bool)
	for _, f := range []string{"../deploy/grafana/mm2go.json", "../deploy/prometheus/alerts.yml"} {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`mm2go_[a-z0-9_]+`).FindAllString(string(data), -1) {
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				m = strings.TrimSuffix(m, suffix)
			}
			used[m] = true
		}
	}
	var missing []string
	absent := func() bool {
		present := make(map[string]bool)
		for _, line := range strings.Split(getBody("http://"+addr+"/metrics"), "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name := line[:strings.IndexAny(line, "{ ")]
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				name = strings.TrimSuffix(name, suffix)
			}
			present[name] = true
		}
		missing = missing[:0]
		for m := range used {
			if !present[m] && !eventOnly[m] {
				missing = append(missing, m)
			}
		}
		return len(missing) > 0
	}
	// The lag series appear at the first lag listing (every 5 s).
	deadline := time.Now().Add(30 * time.Second)
	for absent() && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	sort.Strings(missing)
	require.Empty(t, missing, "metrics the dashboard or the alerts use, absent from /metrics on real Kafka")
	t.Logf("%d metrics of the dashboard and alerts checked on real Kafka (%d event-only)", len(used), len(eventOnly))
}
