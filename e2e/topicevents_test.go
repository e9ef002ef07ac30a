package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestIntegrationSourceTopicRecreated: a source topic deleted and created
// again under the same name while mm2go copies it is detected by its new
// topic ID; its remote topic already holds the old records, so copying of
// the topic stops (nothing copied from a wrong offset) with an error naming
// the topic, and the blocked partitions are exported.
func TestIntegrationSourceTopicRecreated(t *testing.T) {
	beside(t)
	e := newEnv(t)
	topic := e.topic("re")
	e.createTopic(topic, 1, nil)
	var seq int
	produceN(t, e.srcCl, []string{topic}, 1, 20, &seq)
	addr := freePort(t)
	p := e.start("-c", e.config(), "--web.listen-address", addr)
	eventually(t, time.Minute, "first incarnation copied", func() bool { return records(t, e.dstAdm, e.remote(topic)) == 20 })

	_, err := e.srcAdm.DeleteTopics(e.ctx(), topic)
	require.NoError(t, err)
	eventually(t, 30*time.Second, "topic deleted", func() bool {
		td, err := e.srcAdm.ListTopics(e.ctx(), topic)
		return err == nil && td[topic].Err != nil
	})
	eventually(t, 30*time.Second, "topic created again", func() bool {
		_, err := e.srcAdm.CreateTopic(e.ctx(), 1, 1, nil, topic)
		return err == nil
	})
	// A new producer: the old one's metadata names the old topic ID.
	fresh, err := kgo.NewClient(kgo.SeedBrokers(sourceSeeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(fresh.Close)
	eventually(t, 30*time.Second, "records written to the new topic", func() bool {
		_, err := produce(fresh, []string{topic}, 1, 5, &seq)
		return err == nil
	})

	eventually(t, time.Minute, "the recreation reported", func() bool {
		return strings.Contains(p.out.String(), "source topic recreated") &&
			scrape(t, addr, `mm2go_replicator_partitions_blocked{flow="`+e.src+`->`+e.dst+`",task="0"}`) == 1
	})
	// A topic created now is found by a later discovery round and copied:
	// rounds ran after the block, and none copied the blocked topic.
	other := e.topic("other")
	e.createTopic(other, 1, nil)
	produceN(t, e.srcCl, []string{other}, 1, 3, &seq)
	eventually(t, time.Minute, "a later topic copied", func() bool { return records(t, e.dstAdm, e.remote(other)) == 3 })
	require.EqualValues(t, 20, records(t, e.dstAdm, e.remote(topic)), "nothing of the new topic copied over the old one")
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second))
}

// TestIntegrationRetentionLoss: records removed from the source before
// mm2go copied them are counted and logged when copying resumes, never
// skipped silently.
func TestIntegrationRetentionLoss(t *testing.T) {
	beside(t)
	e := newEnv(t)
	topic := e.topic("lost")
	e.createTopic(topic, 1, nil)
	var seq int
	produceN(t, e.srcCl, []string{topic}, 1, 10, &seq)
	cfg := e.config()
	p := e.start("-c", cfg, "--web.listen-address", "")
	eventually(t, time.Minute, "first records copied", func() bool { return records(t, e.dstAdm, e.remote(topic)) == 10 })
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second))

	// While mm2go is down, 30 more records arrive and the first 25 of
	// them are deleted (as retention would).
	produceN(t, e.srcCl, []string{topic}, 1, 30, &seq)
	del := kadm.Offsets{}
	del.AddOffset(topic, 0, 35, -1)
	_, err := e.srcAdm.DeleteRecords(e.ctx(), del)
	require.NoError(t, err)

	addr := freePort(t)
	p = e.start("-c", cfg, "--web.listen-address", addr)
	eventually(t, time.Minute, "the rest copied", func() bool { return records(t, e.dstAdm, e.remote(topic)) == 15 })
	eventually(t, 30*time.Second, "the loss counted", func() bool {
		return scrape(t, addr, `mm2go_replicator_source_records_lost_total{flow="`+e.src+`->`+e.dst+`",topic="`+topic+`"}`) == 25
	})
	require.Contains(t, p.out.String(), "source records removed by retention before they were copied")
}

// TestIntegrationSourceTopicDeletedQuietly: a source topic deleted while
// mm2go copies it gives a few log lines, not a storm (547 warnings in 3.6 s
// before warnings of one cause were written once per 30 s).
func TestIntegrationSourceTopicDeletedQuietly(t *testing.T) {
	beside(t)
	e := newEnv(t)
	topic := e.topic("gone")
	e.createTopic(topic, 6, nil)
	var seq int
	produceN(t, e.srcCl, []string{topic}, 6, 60, &seq)
	// Ten seconds between topic refreshes: until the refresh drops the
	// topic, every fetch of its six partitions fails.
	p := e.start("-c", e.config("refresh.topics.interval.seconds = 10"), "--web.listen-address", "")
	eventually(t, time.Minute, "the topic copied", func() bool { return records(t, e.dstAdm, e.remote(topic)) == 60 })
	before := len(p.out.String())

	_, err := e.srcAdm.DeleteTopics(e.ctx(), topic)
	require.NoError(t, err)
	eventually(t, 30*time.Second, "the deletion noticed by a refresh", func() bool {
		return strings.Contains(p.out.String()[before:], "source topic gone or no longer selected")
	})
	var lines []string
	for _, l := range strings.Split(p.out.String()[before:], "\n") {
		if strings.Contains(l, "WARN") || strings.Contains(l, "ERROR") {
			lines = append(lines, l)
		}
	}
	require.LessOrEqual(t, len(lines), 8, "warnings after the deletion:\n%s", strings.Join(lines, "\n"))
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second))
}
