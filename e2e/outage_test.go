package e2e

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestIntegrationClusterOutage stops the only broker of a cluster of the
// test's own, D, for a while, with two flows through it: P->D (P: the
// shared source cluster, with a producer writing) and D->S (S: the shared
// target). While D is down: the lag of P->D keeps growing in records and
// seconds (its task is lost with the flow's group session, which lives on
// D, and the stopped task's lag is still reported), each flow's
// unreachable gauge grows for D, and /readyz answers 503 naming both,
// once --ready.unreachable-after passed. When D is back, the copies catch
// up and /readyz answers 200 again.
func TestIntegrationClusterOutage(t *testing.T) { firstPassOnly(testClusterOutage)(t) }

func testClusterOutage(t *testing.T) {
	e := newEnv(t)
	d := ownCluster(t, "outage", "")
	dAlias := "d" + e.id
	pTopic, dTopic := e.topic("p"), e.topic("d")
	e.createTopic(pTopic, 2, nil)
	dCl, err := kgo.NewClient(kgo.SeedBrokers(d.bootstrap))
	require.NoError(t, err)
	defer dCl.Close()
	createTopicOn(t, kadm.NewClient(dCl), dTopic, 1, nil)
	require.NoError(t, dCl.ProduceSync(e.ctx(), &kgo.Record{Topic: dTopic, Value: []byte("d")}).FirstErr())

	cfg := e.config(
		"clusters = "+e.src+", "+e.dst+", "+dAlias,
		dAlias+".bootstrap.servers = "+d.bootstrap,
		e.src+"->"+e.dst+".enabled = false",
		e.src+"->"+dAlias+".enabled = true",
		e.src+"->"+dAlias+".topics = "+pTopic,
		dAlias+"->"+e.dst+".enabled = true",
		dAlias+"->"+e.dst+".topics = "+dTopic,
		dAlias+".offset.storage.replication.factor = 1",
		e.dst+"->"+dAlias+".enabled = false",
		dAlias+"->"+e.src+".enabled = false",
		"emit.heartbeats.enabled = false",
	)
	addr := freePort(t)
	mm := e.start("-c", cfg, "--web.listen-address", addr, "--lag-interval", "1s", "--ready.unreachable-after", "3s")
	ready := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	pd, ds := e.src+"->"+dAlias, dAlias+"->"+e.dst
	lag := func() float64 {
		return scrape(t, addr, `mm2go_replicator_lag_records{flow="`+pd+`",task="0",topic="`+pTopic+`"}`)
	}
	age := func() float64 {
		return scrape(t, addr, `mm2go_replicator_lag_seconds{flow="`+pd+`",task="0",topic="`+pTopic+`"}`)
	}
	unreachable := func(flow, cluster string) float64 {
		return scrape(t, addr, `mm2go_flow_cluster_unreachable_seconds{cluster="`+cluster+`",flow="`+flow+`"}`)
	}
	var seq int
	produceN(t, e.srcCl, []string{pTopic}, 2, 100, &seq)
	eventually(t, time.Minute, "both flows copying, and ready", func() bool {
		code, _ := ready()
		return code == http.StatusOK && lag() == 0 && records(t, e.dstAdm, dAlias+"."+dTopic) == 1
	})

	stopProducing := produceEvery(e.srcCl, pTopic, 2, 10, 50*time.Millisecond, seq)
	down := time.Now()
	d.run("term", "1")
	var body string
	eventually(t, time.Minute, "/readyz 503 naming D for both flows", func() bool {
		var code int
		code, body = ready()
		return code == http.StatusServiceUnavailable &&
			strings.Contains(body, pd+" (target "+dAlias+" unreachable for ") && strings.Contains(body, ds+" (source "+dAlias+" unreachable for ")
	})
	// Unreachable counts from the start of the first failed check, which
	// may have begun up to one --lag-interval before the broker went away.
	require.GreaterOrEqual(t, time.Since(down), 2*time.Second, "not before --ready.unreachable-after, less one check: %s", body)
	l1, a1 := lag(), age()
	eventually(t, time.Minute, "the lag growing while D is down", func() bool { return lag() > l1+50 && age() > a1+1 })
	require.GreaterOrEqual(t, unreachable(pd, "target"), 3.0)
	require.GreaterOrEqual(t, unreachable(ds, "source"), 3.0)
	t.Logf("during the outage, %s: lag %v records; /readyz: %s", pd, lag(), strings.TrimSpace(body))
	eventually(t, time.Minute, "the task of "+pd+" lost with its group on D, its lag still reported", func() bool {
		return scrape(t, addr, `mm2go_flow_tasks{flow="`+pd+`"}`) == 0 && lag() > l1+100
	})

	d.run("restart-node", "1")
	require.NoError(t, stopProducing())
	eventually(t, 2*time.Minute, "ready, caught up, D answering", func() bool {
		code, _ := ready()
		return code == http.StatusOK && lag() == 0 && unreachable(pd, "target") == 0 && unreachable(ds, "source") == 0
	})
	require.Zero(t, mm.stop(t, syscall.SIGTERM, 30*time.Second))
}
