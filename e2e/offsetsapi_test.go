package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
)

// offsetsDoc is the document of GET /api/v1/offsets and `mm2go offsets
// translate --json`.
type offsetsDoc struct {
	Flow    string `json:"flow"`
	Offsets []struct {
		Group        string `json:"group"`
		Topic        string `json:"topic"`
		Partition    int32  `json:"partition"`
		SourceOffset int64  `json:"source_offset"`
		RemoteTopic  string `json:"remote_topic"`
		TargetOffset *int64 `json:"target_offset"`
		Mode         string `json:"mode"`
	} `json:"offsets"`
}

// TestIntegrationOffsetsAPI: GET /api/v1/offsets?flow=A->B&group=RE on a
// running mm2go returns the translated offsets of the source groups
// matching RE, the same document as `mm2go offsets translate --groups RE
// --json`, with the exact target offsets.
func TestIntegrationOffsetsAPI(t *testing.T) {
	beside(t)
	e := newEnv(t)
	topic := e.topic("o")
	e.createTopic(topic, 2, nil)
	var seq int
	produceN(t, e.srcCl, []string{topic}, 2, 100, &seq)
	commit := func(group string, offs map[int32]int64) {
		o := make(kadm.Offsets)
		for p, at := range offs {
			o.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
		}
		_, err := e.srcAdm.CommitOffsets(e.ctx(), group, o)
		require.NoError(t, err)
	}
	ga, gb, other := "g"+e.id+"-a", "g"+e.id+"-b", "other"+e.id
	commit(ga, map[int32]int64{0: 30, 1: 20})
	commit(gb, map[int32]int64{0: 50})
	commit(other, map[int32]int64{0: 10})

	cfg := e.config()
	addr := freePort(t)
	mm := e.start("-c", cfg, "--web.listen-address", addr)
	flow := e.src + "->" + e.dst
	get := func(query url.Values) (int, []byte) {
		resp, err := http.Get("http://" + addr + "/api/v1/offsets?" + query.Encode())
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b
	}
	re := "g" + e.id + "-.*"
	var api offsetsDoc
	eventually(t, time.Minute, "every partition translated exactly", func() bool {
		code, b := get(url.Values{"flow": {flow}, "group": {re}})
		if code != http.StatusOK {
			return false
		}
		require.NoError(t, json.Unmarshal(b, &api), "%s", b)
		if len(api.Offsets) != 3 {
			return false
		}
		for _, o := range api.Offsets {
			if o.Mode != "exact" {
				return false
			}
		}
		return true
	})
	marker := int64(0)
	if fenced() {
		marker = 1 // the fence's abort marker at the start of each remote partition
	}
	require.Equal(t, flow, api.Flow)
	for i, want := range []struct {
		group     string
		partition int32
		source    int64
	}{{ga, 0, 30}, {ga, 1, 20}, {gb, 0, 50}} {
		o := api.Offsets[i]
		require.Equal(t, want.group, o.Group)
		require.Equal(t, topic, o.Topic)
		require.Equal(t, e.remote(topic), o.RemoteTopic)
		require.Equal(t, want.partition, o.Partition)
		require.Equal(t, want.source, o.SourceOffset)
		require.NotNil(t, o.TargetOffset)
		require.Equal(t, want.source+marker, *o.TargetOffset, "%s[%d]", o.Group, o.Partition)
	}

	out, err := exec.Command(binary, "offsets", "translate", "-c", cfg, "--flow", flow, "--groups", re, "--json", "--timeout", "30s").Output()
	require.NoError(t, err, "%s", out)
	var cli offsetsDoc
	require.NoError(t, json.Unmarshal(out, &cli), "%s", out)
	require.Equal(t, api, cli, "the API and the command agree")

	code, b := get(url.Values{"flow": {"nope->none"}, "group": {re}})
	require.Equal(t, http.StatusNotFound, code, "%s", b)
	require.Contains(t, string(b), `flow \"nope->none\" does not run here`)
	code, b = get(url.Values{"flow": {flow}})
	require.Equal(t, http.StatusBadRequest, code, "%s", b)
	code, b = get(url.Values{"flow": {flow}, "group": {"(unclosed"}})
	require.Equal(t, http.StatusBadRequest, code, "%s", b)
	require.Zero(t, mm.stop(t, syscall.SIGTERM, 30*time.Second))
}
