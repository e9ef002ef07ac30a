package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestIntegrationActiveActiveIdentity: both flows enabled under the
// identity policy, where topic names cannot tell a record's origin (MM2
// would copy records back and forth forever). mm2go's provenance header
// (mm2go.provenance.headers=auto) stops the loop: each cluster ends with its
// own records and the other's, once each, and nothing more arrives.
func TestIntegrationActiveActiveIdentity(t *testing.T) {
	beside(t)
	e := newEnv(t)
	topic := e.topic("orders")
	e.createTopic(topic, 2, nil)
	createTopicOn(t, e.dstAdm, topic, 2, nil)
	cfg := e.config(
		"replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
		e.dst+"->"+e.src+".enabled = true",
		e.dst+"->"+e.src+".topics = t"+e.id+"-.*",
		e.src+".offset.storage.replication.factor = 1",
	)
	p := e.start("-c", cfg, "--web.listen-address", "")

	var seq int
	produceN(t, e.srcCl, []string{topic}, 2, 300, &seq)
	dcl, err := kgo.NewClient(kgo.SeedBrokers(targetSeeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(dcl.Close)
	produceN(t, dcl, []string{topic}, 2, 200, &seq)

	eventually(t, time.Minute, "both clusters hold 500 records", func() bool {
		return records(t, e.srcAdm, topic) == 500 && records(t, e.dstAdm, topic) == 500
	})
	// A loop would copy a record back after it arrived. One more record on
	// each partition of each side, copied across, shows that each flow read
	// past every record that arrived before it.
	produceN(t, e.srcCl, []string{topic}, 2, 2, &seq)
	produceN(t, dcl, []string{topic}, 2, 2, &seq)
	eventually(t, time.Minute, "both clusters hold the 4 last records", func() bool {
		return records(t, e.srcAdm, topic) >= 504 && records(t, e.dstAdm, topic) >= 504
	})
	require.EqualValues(t, 504, records(t, e.srcAdm, topic), "nothing copied back to the source")
	require.EqualValues(t, 504, records(t, e.dstAdm, topic), "nothing copied back to the target")

	for _, seeds := range [][]string{sourceSeeds, targetSeeds} {
		seen := map[string]int{}
		for _, rs := range readAll(t, seeds, topic) {
			for _, r := range rs {
				seen[string(r.Value)]++
			}
		}
		require.Len(t, seen, 504)
		for v, n := range seen {
			require.Equal(t, 1, n, "record %q", v)
		}
	}
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second))
}
