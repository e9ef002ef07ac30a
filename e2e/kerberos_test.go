package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/ktest"
)

// TestIntegrationKerberos runs a flow whose source takes clients only over
// SASL_PLAINTEXT with GSSAPI: a real MIT KDC (Debian's krb5-kdc, started by
// testbed/kdc.sh on loopback) and a Kafka broker that validates tickets
// with the JDK's Krb5LoginModule and its own keytab (service principal
// kafka/localhost). mm2go logs in with a keytab from the MM2 file's
// Krb5LoginModule line and krb5.conf from KRB5_CONFIG, copies records and
// syncs a group's offsets; a keytab of a principal the KDC no longer knows
// gives one error naming the cluster, retried with backoff, never a crash
// loop.
func TestIntegrationKerberos(t *testing.T) { firstPassOnly(testKerberos)(t) }

func testKerberos(t *testing.T) {
	needKafka(t)
	testbed := testbedDir()
	kdc := t.TempDir()
	kdcPort := scFreePortPair(t)
	out, err := exec.Command(filepath.Join(testbed, "kdc.sh"), "start", kdc, strconv.Itoa(kdcPort), "kafka/localhost", "mm2go", "-gone").Output()
	require.NoError(t, err, "kdc.sh start (apt-get install krb5-kdc krb5-admin-server): %s", errOutput(err))
	t.Cleanup(func() { _ = exec.Command(filepath.Join(testbed, "kdc.sh"), "stop", kdc).Run() })
	krb5conf := strings.TrimSpace(string(out))
	t.Setenv("KRB5_CONFIG", krb5conf) // for this process's clients and the mm2go it starts

	src := ownClusterWith(t, "krb", func(port int) string {
		return strings.Join([]string{
			fmt.Sprintf("listeners=SASL_PLAINTEXT://localhost:%d,CONTROLLER://127.0.0.1:%d", port, port+1000),
			fmt.Sprintf("advertised.listeners=SASL_PLAINTEXT://localhost:%d", port),
			"inter.broker.listener.name=SASL_PLAINTEXT",
			"listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
			"sasl.enabled.mechanisms=GSSAPI",
			"sasl.mechanism.inter.broker.protocol=GSSAPI",
			"sasl.kerberos.service.name=kafka",
			`listener.name.sasl_plaintext.gssapi.sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true keyTab="` +
				filepath.Join(kdc, "kafka_localhost.keytab") + `" principal="kafka/localhost@MM2GO.TEST";`,
		}, `\n`)
	}, "KAFKA_JVM_OPTS=-Djava.security.krb5.conf="+krb5conf, "KAFKA_READY_PROBE=port")
	src.bootstrap = strings.Replace(src.bootstrap, "127.0.0.1", "localhost", 1) // the service principal's host

	e := newEnv(t)
	topic, group := "krb"+e.id, "gkrb"+e.id
	file := func(principal, keytab string) string {
		path := filepath.Join(t.TempDir(), "mm2.properties")
		require.NoError(t, os.WriteFile(path, []byte(strings.Join([]string{
			"clusters = " + e.src + ", " + e.dst,
			e.src + ".bootstrap.servers = " + src.bootstrap,
			e.src + ".security.protocol = SASL_PLAINTEXT",
			e.src + ".sasl.mechanism = GSSAPI",
			e.src + ".sasl.kerberos.service.name = kafka",
			e.src + `.sasl.jaas.config = com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true keyTab="` +
				filepath.Join(kdc, keytab) + `" principal="` + principal + `";`,
			e.dst + ".bootstrap.servers = " + strings.Join(targetSeeds, ","),
			e.src + "->" + e.dst + ".enabled = true",
			e.src + "->" + e.dst + ".topics = " + topic,
			e.src + "->" + e.dst + ".groups = " + group,
			"sync.group.offsets.enabled = true",
			"sync.group.offsets.interval.seconds = 1",
			"emit.checkpoints.interval.seconds = 1",
			"refresh.groups.interval.seconds = 1",
			e.dst + "->" + e.src + ".enabled = false",
			"emit.heartbeats.enabled = false",
			"heartbeats.replication.enabled = false",
			"replication.factor = 1", "offset-syncs.topic.replication.factor = 1", "checkpoints.topic.replication.factor = 1",
			"heartbeats.topic.replication.factor = 1", e.dst + ".offset.storage.replication.factor = 1",
			"refresh.topics.interval.seconds = 1",
		}, "\n")+"\n"), 0o600))
		return path
	}
	good := file("mm2go@MM2GO.TEST", "mm2go.keytab")

	// The test's own clients on the source log in as mm2go does: built
	// from the same file.
	cfg, _, err := config.Load(good)
	require.NoError(t, err)
	srcCl, err := kgo.NewClient(append(cfg.Flow(e.src, e.dst).Client(config.RoleSourceProducer).Opts(), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	require.NoError(t, err)
	t.Cleanup(srcCl.Close)
	srcAdm := kadm.NewClient(srcCl)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createTopicOn(t, srcAdm, topic, 3, nil)
	seq := 0
	produceN(t, srcCl, []string{topic}, 3, 300, &seq)
	offs := make(kadm.Offsets)
	for p := range int32(3) {
		offs.Add(kadm.Offset{Topic: topic, Partition: p, At: 60, LeaderEpoch: -1})
	}
	require.NoError(t, srcAdm.CommitAllOffsets(ctx, group, offs))

	p := e.start(mmArgs(good)...)
	remote := e.src + "." + topic
	eventually(t, time.Minute, "300 records copied from the Kerberos cluster", func() bool {
		n, err := ktest.Records(ctx, e.dstAdm, remote)
		return err == nil && n == 300
	})
	// The exact sync commits into groups seen consuming: the group
	// commits again, as a consumer that then stopped. mm2go must have seen
	// the first commit (its checkpoints say so) before the second comes:
	// a group whose first look finds 90 looks idle and is left alone.
	eventually(t, 30*time.Second, "checkpoints of the group's first commit", func() bool {
		cps := lastCheckpoints(t, e, group, remote)
		return len(cps) == 3 && cps[0].UpstreamOffset == 60 && cps[1].UpstreamOffset == 60 && cps[2].UpstreamOffset == 60
	})
	for p := range int32(3) {
		offs.Add(kadm.Offset{Topic: topic, Partition: p, At: 90, LeaderEpoch: -1})
	}
	require.NoError(t, srcAdm.CommitAllOffsets(ctx, group, offs))
	eventually(t, 30*time.Second, "the group's offsets synced", func() bool {
		got, err := e.dstAdm.FetchOffsets(ctx, group)
		if err != nil {
			return false
		}
		n := 0
		got.Each(func(o kadm.OffsetResponse) {
			if o.Topic == remote && o.Err == nil && o.At >= 90 {
				n++
			}
		})
		return n == 3
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")
	require.NotContains(t, p.out.String(), "ERROR")

	// A keytab of a principal the KDC deleted: one clear error naming the
	// cluster, retried.
	bad := file("gone@MM2GO.TEST", "gone.keytab")
	addr := freePort(t)
	q := e.start("-c", bad, "--web.listen-address", addr)
	want := fmt.Sprintf("cluster %s (%s): Kerberos (GSSAPI) login failed", e.src, src.bootstrap)
	eventually(t, 30*time.Second, "the Kerberos error, and a second attempt", func() bool {
		return strings.Contains(q.out.String(), want) &&
			scrape(t, addr, `mm2go_flow_restarts_total{flow="`+e.src+`->`+e.dst+`"}`) >= 2
	})
	require.Contains(t, q.out.String(), "Client not found in Kerberos database")
	select {
	case <-q.done:
		t.Fatalf("mm2go exited instead of retrying:\n%s", q.out.String())
	default:
	}
	require.Equal(t, 0, q.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")
}

// errOutput is the stderr of a failed exec.Cmd.Output.
func errOutput(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}
