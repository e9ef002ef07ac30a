package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// javaStore is a key store and a trust store as keytool makes them.
type javaStore struct {
	typ                          string // JKS or PKCS12
	keystore, truststore         string
	storePW, keyPW, truststorePW string
}

// makeJavaStores makes, with keytool, a key store of type typ holding a key
// for CN=cn signed (by openssl) with the bed's CA, and a trust store of the
// same type holding the CA, as an MM2 user's files have them.
func (b *secureBed) makeJavaStores(t *testing.T, dir, typ, cn string) javaStore {
	t.Helper()
	keytool, err := exec.LookPath("keytool")
	require.NoError(t, err, "keytool (a JDK) is needed")
	ext := map[string]string{"JKS": "jks", "PKCS12": "p12"}[typ]
	s := javaStore{typ: typ, keystore: filepath.Join(dir, "client."+ext), truststore: filepath.Join(dir, "trust."+ext),
		storePW: "store-" + uid(t), keyPW: "key-" + uid(t), truststorePW: "trust-" + uid(t)}
	if typ == "PKCS12" {
		s.keyPW = s.storePW // keytool gives a PKCS12 key the store's password
	}
	run := func(name string, args ...string) {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
	}
	store := []string{"-keystore", s.keystore, "-storetype", typ, "-storepass", s.storePW}
	run(keytool, append([]string{"-genkeypair", "-alias", "mm2go", "-keyalg", "EC", "-groupname", "secp256r1",
		"-dname", "CN=" + cn, "-validity", "30", "-keypass", s.keyPW}, store...)...)
	csr, crt, chain, extFile := s.keystore+".csr", s.keystore+".crt", s.keystore+".chain", s.keystore+".ext"
	run(keytool, append([]string{"-certreq", "-alias", "mm2go", "-keypass", s.keyPW, "-file", csr}, store...)...)
	require.NoError(t, os.WriteFile(extFile, []byte("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"), 0o600))
	caKey := filepath.Join(filepath.Dir(b.caPEM), "ca.key")
	run("openssl", "x509", "-req", "-in", csr, "-CA", b.caPEM, "-CAkey", caKey, "-set_serial", strconv.FormatInt(time.Now().UnixNano(), 10),
		"-days", "30", "-extfile", extFile, "-out", crt)
	ca, err := os.ReadFile(b.caPEM)
	require.NoError(t, err)
	signed, err := os.ReadFile(crt)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(chain, append(signed, ca...), 0o600))
	run(keytool, append([]string{"-importcert", "-alias", "ca", "-file", b.caPEM, "-noprompt"}, store...)...)
	run(keytool, append([]string{"-importcert", "-alias", "mm2go", "-keypass", s.keyPW, "-file", chain, "-noprompt"}, store...)...)
	run(keytool, "-importcert", "-alias", "ca", "-file", b.caPEM, "-noprompt",
		"-keystore", s.truststore, "-storetype", typ, "-storepass", s.truststorePW)
	return s
}

// lines are the ssl.* settings of alias for s.
func (s javaStore) lines(alias string) []string {
	return []string{
		alias + ".ssl.keystore.type = " + s.typ,
		alias + ".ssl.keystore.location = " + s.keystore,
		alias + ".ssl.keystore.password = " + s.storePW,
		alias + ".ssl.key.password = " + s.keyPW,
		alias + ".ssl.truststore.type = " + s.typ,
		alias + ".ssl.truststore.location = " + s.truststore,
		alias + ".ssl.truststore.password = " + s.truststorePW,
	}
}

// testJavaStores copies records and syncs a group's offsets between the
// mutual TLS listeners of the two clusters, mm2go holding a JKS key store
// and trust store for the source and PKCS12 ones for the target, all made
// by keytool. A wrong store password is one error naming the key, and the
// daemon exits at once instead of restarting.
func (b *secureBed) testJavaStores(t *testing.T) {
	dir := t.TempDir()
	// CN=admin is a super user: this test is about the stores, not ACLs.
	jks := b.makeJavaStores(t, dir, "JKS", "admin")
	p12 := b.makeJavaStores(t, t.TempDir(), "PKCS12", "admin")
	id := uid(t)
	src, dst := "jsrc"+id, "jdst"+id
	topic, group := "t"+id+"-stores", "g"+id+"-stores"
	write := func(name string, p12 javaStore) string {
		lines := []string{
			"clusters = " + src + ", " + dst,
			copyModeLine(src, dst),
			src + ".bootstrap.servers = " + b.src.mtls,
			dst + ".bootstrap.servers = " + b.dst.mtls,
			"security.protocol = SSL",
			src + "->" + dst + ".enabled = true",
			src + "->" + dst + ".topics = " + regexp.QuoteMeta(topic),
			src + "->" + dst + ".groups = " + regexp.QuoteMeta(group),
			dst + "->" + src + ".enabled = false",
			"replication.factor = 1",
			"offset-syncs.topic.replication.factor = 1",
			"checkpoints.topic.replication.factor = 1",
			"heartbeats.topic.replication.factor = 1",
			dst + ".offset.storage.replication.factor = 1",
			dst + ".offset.flush.interval.ms = 500",
			"refresh.topics.interval.seconds = 1",
			"refresh.groups.interval.seconds = 1",
			"emit.checkpoints.interval.seconds = 1",
			"sync.group.offsets.enabled = true",
			"sync.group.offsets.interval.seconds = 1",
		}
		lines = append(append(lines, jks.lines(src)...), p12.lines(dst)...)
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
		return path
	}
	cfg := write("mm2.properties", p12)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createTopicOn(t, b.src.adm, topic, 1, nil)
	const n = 50
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: []byte("v" + strconv.Itoa(i))}
	}
	require.NoError(t, b.adminClient(t, b.src).ProduceSync(ctx, recs...).FirstErr())
	committed := kadm.Offsets{}
	committed.Add(kadm.Offset{Topic: topic, Partition: 0, At: 30, LeaderEpoch: -1})
	_, err := b.src.adm.CommitOffsets(ctx, group, committed)
	require.NoError(t, err)

	code, stdout, stderr := runBinary(t, "validate", "-c", cfg, "--connect")
	require.Equal(t, 0, code, "validate --connect: %s\n%s", stdout, stderr)
	for _, pw := range []string{jks.storePW, jks.keyPW, jks.truststorePW, p12.storePW, p12.truststorePW} {
		require.NotContains(t, stdout+stderr, pw, "a store password in validate's output")
	}

	p := (&env{t: t}).start("-c", cfg, "--web.listen-address", "")
	remote := src + "." + topic
	eventually(t, time.Minute, "every record on the target", func() bool { return b.records(t, b.dst, remote) == n })
	knock(t, b.dst.adm, group, remote, func(opts ...kgo.Opt) *kgo.Client { return b.adminClient(t, b.dst, opts...) })
	var marker int64
	if fenced() {
		marker = 1
	}
	eventually(t, 30*time.Second, "the group's offset synced to the target", func() bool {
		offs, err := b.dst.adm.FetchOffsets(ctx, group)
		o, ok := offs.Lookup(remote, 0)
		return err == nil && ok && o.At == 30+marker
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")
	require.NotContains(t, p.out.String(), "\tERROR\t", "no error over mutual TLS")

	// A wrong password: one error naming the key, exit 2, no restarts.
	wrong := p12
	wrong.storePW = "wrong-" + uid(t)
	bad := write("wrong.properties", wrong)
	for _, args := range [][]string{{"validate", "-c", bad}, {"-c", bad}} {
		code, stdout, stderr := runBinary(t, args...)
		require.Equal(t, 2, code, "mm2go %s: %s\n%s", strings.Join(args, " "), stdout, stderr)
		want := fmt.Sprintf("%s.ssl.keystore.password: wrong password for PKCS12 key store file %q", dst, p12.keystore)
		require.Equal(t, 1, strings.Count(stderr, "ssl.keystore.password"), "%s", stderr)
		require.Contains(t, stderr, want)
		require.NotContains(t, stderr, wrong.storePW)
	}
}
