package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/mm2go/mm2go/internal/ktest"
)

// secureUser is the SCRAM user mm2go logs in as on both secure clusters;
// it has only the ACLs of docs/security.md.
const secureUser = "mm2go"

// secureCluster is one cluster started by testbed/secure.sh.
type secureCluster struct {
	name      string // kafka-cluster.sh's name
	bootstrap string
	mtls      string // the mutual TLS listener's address
	userPW    string // secureUser's password
	adm       *kadm.Client
	cl        *kgo.Client // as the super user "admin"
}

// secureBed is two single-node clusters that take clients only over
// SASL_SSL (SCRAM-SHA-512, certificates of a CA made for the test) and
// enforce ACLs, the source and the target of the flows under test.
type secureBed struct {
	idp        *oauthIDP // the OAuth provider whose tokens the brokers take
	caPEM      string    // CA of both brokers' certificates
	otherCAPEM string    // a CA that signed nothing the brokers use
	adminPW    string
	src, dst   *secureCluster
}

// TestIntegrationSecurity runs mm2go against real Kafka listeners with
// SASL_SSL and ACLs on the source and on the target. The two clusters are
// started once for all subtests (about 6s) and stopped at the end.
func TestIntegrationSecurity(t *testing.T) {
	needKafka(t)
	// Its own clusters; mostly waiting (token lifetimes, restarts): it runs
	// beside the other parallel tests.
	t.Parallel()
	idp := newOAuthIDP(t)
	bed := startSecureBed(t, idp)
	t.Run("minimal ACLs replicate, checkpoint, sync and leak no secret", bed.testMinimalACLs)
	// The logins are the same in every copy mode (the clients are); the
	// minimal ACLs are not (the batches mode fences with a transactional
	// id, exactly-once flows write in transactions with it).
	t.Run("wrong password names the cluster", firstPassOnly(bed.testWrongPassword))
	t.Run("wrong CA names the cluster", firstPassOnly(bed.testWrongCA))
	t.Run("mutual TLS with JKS and PKCS12 stores made by keytool", firstPassOnly(bed.testJavaStores))
	t.Run("OAUTHBEARER with the client-credentials grant, tokens refreshed", firstPassOnly(bed.testOAuth))
}

// startSecureBed starts the two clusters with testbed/secure.sh on free
// ports; the test's cleanup stops them.
func startSecureBed(t *testing.T, idp *oauthIDP) *secureBed {
	t.Helper()
	testbed := testbedDir()
	script := filepath.Join(testbed, "secure.sh")
	dir := t.TempDir()
	certs, other := filepath.Join(dir, "certs"), filepath.Join(dir, "other-ca")
	for _, d := range []string{certs, other} {
		out, err := exec.Command(script, "certs", d).CombinedOutput()
		require.NoError(t, err, "secure.sh certs: %s", out)
	}
	id := uid(t)
	bed := &secureBed{
		caPEM: filepath.Join(certs, "ca.pem"), otherCAPEM: filepath.Join(other, "ca.pem"),
		adminPW: "admin-" + uid(t) + uid(t), idp: idp,
		src: &secureCluster{name: "sec-src-" + id, userPW: "src-" + uid(t) + uid(t)},
		dst: &secureCluster{name: "sec-dst-" + id, userPW: "dst-" + uid(t) + uid(t)},
	}
	ports := freePorts(t, 6)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, c := range []*secureCluster{bed.src, bed.dst} {
		t.Cleanup(func() {
			cmd := exec.Command(script, "stop", c.name)
			cmd.Env = append(os.Environ(), "KAFKA_STOP_SIGNAL=KILL")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Logf("secure.sh stop %s: %v: %s", c.name, err, out)
			}
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(script, "start", c.name, strconv.Itoa(ports[2*i]), strconv.Itoa(ports[2*i+1]), certs)
			c.mtls = "127.0.0.1:" + strconv.Itoa(ports[4+i])
			cmd.Env = append(os.Environ(), "SECURE_ADMIN_PASSWORD="+bed.adminPW, "SECURE_USERS="+secureUser+":"+c.userPW,
				"SECURE_SSL_PORT="+strconv.Itoa(ports[4+i]), "SECURE_OAUTH_JWKS_URL="+idp.url+"/jwks")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				errs[i] = fmt.Errorf("secure.sh start %s: %w\n%s", c.name, err, stderr.String())
				return
			}
			c.bootstrap = strings.TrimSpace(string(out))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	for _, c := range []*secureCluster{bed.src, bed.dst} {
		c.cl = bed.adminClient(t, c)
		c.adm = kadm.NewClient(c.cl)
	}
	return bed
}

// adminClient is a client of c as the super user.
func (b *secureBed) adminClient(t *testing.T, c *secureCluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(b.adminOpts(t, c), opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// records counts the records of topic on c (not its end offsets: the
// abort markers of fencing take offsets too).
func (b *secureBed) records(t *testing.T, c *secureCluster, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := ktest.Records(ctx, c.adm, topic, b.adminOpts(t, c)...)
	if err != nil {
		return 0
	}
	return n
}

// adminOpts are the client options of the admin user on c.
func (b *secureBed) adminOpts(t *testing.T, c *secureCluster) []kgo.Opt {
	t.Helper()
	pem, err := os.ReadFile(b.caPEM)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))
	return []kgo.Opt{
		kgo.SeedBrokers(c.bootstrap),
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: "admin", Pass: b.adminPW}.AsSha512Mechanism()),
		kgo.MetadataMinAge(100 * time.Millisecond),
	}
}

// freePorts returns n distinct free loopback ports, none of them one of the
// shared clusters' ports.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	reserved := map[int]bool{19092: true, 29092: true, 19192: true, 29192: true, 20092: true, 30092: true}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	var ports []int
	for len(ports) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		lns = append(lns, ln)
		if p := ln.Addr().(*net.TCPAddr).Port; !reserved[p] {
			ports = append(ports, p)
		}
	}
	return ports
}

// jaas is a sasl.jaas.config value for SCRAM.
func jaas(user, password string) string {
	return `org.apache.kafka.common.security.scram.ScramLoginModule required username="` + user + `" password="` + password + `";`
}

// secureFlow describes the MM2 file of one subtest: the flow src->dst over
// SASL_SSL between the bed's clusters.
type secureFlow struct {
	id       string
	src, dst string // aliases
	srcJAAS  string // sasl.jaas.config of the source (a value or a ${...} reference)
	dstJAAS  string
	srcCA    string // ssl.truststore.location of the source
	dstCA    string
	mech     string // sasl.mechanism
	extra    []string
}

func (b *secureBed) flow(t *testing.T) *secureFlow {
	id := uid(t)
	return &secureFlow{
		id: id, src: "src" + id, dst: "dst" + id,
		srcJAAS: jaas(secureUser, b.src.userPW), dstJAAS: jaas(secureUser, b.dst.userPW),
		srcCA: b.caPEM, dstCA: b.caPEM, mech: "SCRAM-SHA-512",
	}
}

func (f *secureFlow) topicPrefix() string { return "t" + f.id + "-" }
func (f *secureFlow) groupPrefix() string { return "g" + f.id + "-" }

// write writes the MM2 file into dir and returns its path.
func (f *secureFlow) write(t *testing.T, b *secureBed, dir string) string {
	t.Helper()
	lines := []string{
		"clusters = " + f.src + ", " + f.dst,
		copyModeLine(f.src, f.dst),
		f.src + ".bootstrap.servers = " + b.src.bootstrap,
		f.dst + ".bootstrap.servers = " + b.dst.bootstrap,
		"security.protocol = SASL_SSL",
		"sasl.mechanism = " + f.mech,
		"ssl.truststore.type = PEM",
		f.src + ".ssl.truststore.location = " + f.srcCA,
		f.dst + ".ssl.truststore.location = " + f.dstCA,
		f.src + ".sasl.jaas.config = " + f.srcJAAS,
		f.dst + ".sasl.jaas.config = " + f.dstJAAS,
		f.src + "->" + f.dst + ".enabled = true",
		f.src + "->" + f.dst + ".topics = " + regexp.QuoteMeta(f.topicPrefix()) + ".*",
		f.src + "->" + f.dst + ".groups = " + regexp.QuoteMeta(f.groupPrefix()) + ".*",
		f.dst + "->" + f.src + ".enabled = false",
		"replication.factor = 1",
		"offset-syncs.topic.replication.factor = 1",
		"checkpoints.topic.replication.factor = 1",
		"heartbeats.topic.replication.factor = 1",
		f.dst + ".offset.storage.replication.factor = 1",
		f.dst + ".offset.flush.interval.ms = 500",
		"refresh.topics.interval.seconds = 1",
		"refresh.groups.interval.seconds = 1",
		"emit.checkpoints.interval.seconds = 1",
		"emit.heartbeats.interval.seconds = 1",
		"sync.group.offsets.enabled = true",
		"sync.group.offsets.interval.seconds = 1",
		"sync.topic.configs.interval.seconds = 1",
		"sync.topic.acls.interval.seconds = 1",
	}
	lines = append(lines, f.extra...)
	path := filepath.Join(dir, "mm2.properties")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	return path
}

// runBinary runs the mm2go binary to completion and returns its exit code,
// stdout and stderr.
func runBinary(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		require.NoError(t, err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// testMinimalACLs grants the mm2go user exactly the ACLs of docs/security.md
// and runs a flow with every feature on (offset syncs, checkpoints,
// group-offset sync, heartbeats both ways, topic-config and ACL sync,
// partition growth, a restart) at debug log level. Every feature must work
// without a single error or authorization failure in the log; no secret may
// appear in the log, /metrics or `validate` output. The source password
// comes through ${file:...}, the target's through ${env:...}.
func (b *secureBed) testMinimalACLs(t *testing.T) {
	f := b.flow(t)
	dir := t.TempDir()
	vars := map[string]string{
		"SOURCE_BOOTSTRAP": b.src.bootstrap, "TARGET_BOOTSTRAP": b.dst.bootstrap,
		"SRC": f.src, "DST": f.dst, "PRINCIPAL": "User:" + secureUser,
		"TOPICS": f.topicPrefix(), "GROUPS": f.groupPrefix(),
	}
	cmds, err := parseACLDoc("../docs/security.md", vars)
	require.NoError(t, err)
	b.grant(t, cmds)

	secrets := filepath.Join(dir, "secrets.properties")
	require.NoError(t, os.WriteFile(secrets, []byte("source.jaas = "+jaas(secureUser, b.src.userPW)+"\n"), 0o600))
	// os.Setenv, not t.Setenv, which a parallel test may not call: no
	// other test reads this name. The mm2go processes inherit it.
	require.NoError(t, os.Setenv("MM2GO_SEC_TARGET_JAAS", jaas(secureUser, b.dst.userPW)))
	t.Cleanup(func() { _ = os.Unsetenv("MM2GO_SEC_TARGET_JAAS") })
	f.srcJAAS = "${file:" + secrets + ":source.jaas}"
	f.dstJAAS = "${env:MM2GO_SEC_TARGET_JAAS}"
	f.extra = []string{
		"config.providers = file, env",
		"config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider",
		"config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider",
	}
	cfg := f.write(t, b, dir)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic, group := f.topicPrefix()+"orders", f.groupPrefix()+"billing"
	remote := f.src + "." + topic
	createTopicOn(t, b.src.adm, topic, 2, map[string]*string{"retention.ms": new("86400000")})
	const n = 100
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i % 2), Key: []byte(strconv.Itoa(i)), Value: []byte("v" + strconv.Itoa(i))}
	}
	producer := b.adminClient(t, b.src, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, producer.ProduceSync(ctx, recs...).FirstErr())
	committed := kadm.Offsets{}
	committed.Add(kadm.Offset{Topic: topic, Partition: 0, At: 30, LeaderEpoch: -1})
	committed.Add(kadm.Offset{Topic: topic, Partition: 1, At: 20, LeaderEpoch: -1})
	_, err = b.src.adm.CommitOffsets(ctx, group, committed)
	require.NoError(t, err)
	// A topic of the source's name on the target (a "local topic"): group
	// offset sync initializes the group's offsets for it.
	createTopicOn(t, b.dst.adm, topic, 1, nil)

	port := freePorts(t, 1)[0]
	// env.start needs only the test; the shared clusters are not used.
	p := (&env{t: t}).start("-c", cfg, "--log.level", "debug", "--web.listen-address", "127.0.0.1:"+strconv.Itoa(port))

	eventually(t, time.Minute, "every record on the target", func() bool {
		return b.records(t, b.dst, remote) == n
	})
	// The group never consumed while mm2go ran: the exact sync commits its
	// offsets once a consumer of it started on the target.
	knock(t, b.dst.adm, group, remote, func(opts ...kgo.Opt) *kgo.Client { return b.adminClient(t, b.dst, opts...) })
	// The copies of 0..29 and 0..19 sit at 0..29 and 0..19, after the
	// start's abort marker at 0 under fencing.
	var marker int64
	if fenced() {
		marker = 1
	}
	eventually(t, 30*time.Second, "the group's offsets synced to the target", func() bool {
		offs, err := b.dst.adm.FetchOffsets(ctx, group)
		if err != nil {
			return false
		}
		o0, ok0 := offs.Lookup(remote, 0)
		o1, ok1 := offs.Lookup(remote, 1)
		return ok0 && ok1 && o0.At == 30+marker && o1.At == 20+marker
	})
	for _, w := range []struct {
		c     *secureCluster
		topic string
	}{
		{b.dst, f.src + ".checkpoints.internal"},
		{b.dst, "heartbeats"},
		{b.dst, f.src + ".heartbeats"},
		{b.src, "mm2-offset-syncs." + f.dst + ".internal"},
	} {
		eventually(t, 30*time.Second, "records in "+w.topic, func() bool { return b.records(t, w.c, w.topic) > 0 })
	}
	require.Equal(t, "86400000", topicConfig(t, b.dst.adm, remote, "retention.ms"), "topic configs copied at creation")

	// Later changes: a config change and a new partition on the source
	// reach the target (AlterConfigs and Alter on the remote topic).
	_, err = b.src.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: new("43200000")}}, topic)
	require.NoError(t, err)
	_, err = b.src.adm.CreatePartitions(ctx, 1, topic)
	require.NoError(t, err)
	eventually(t, 30*time.Second, "the new partition and the new config on the target", func() bool {
		parts, _ := topicShape(t, b.dst.adm, remote)
		return parts == 3 && topicConfig(t, b.dst.adm, remote, "retention.ms") == "43200000"
	})

	metrics := httpGet(t, "http://127.0.0.1:"+strconv.Itoa(port)+"/metrics")
	require.Contains(t, metrics, "mm2go_")
	if exactlyOnce() {
		// The transactional id's ACLs are enough for transactions too.
		require.Positive(t, scrape(t, "127.0.0.1:"+strconv.Itoa(port), `mm2go_replicator_transactions_total{flow="`+f.src+"->"+f.dst+`",result="committed"}`),
			"transactions committed with the minimal ACLs")
	}
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")

	// A restart reads back what the first run stored (progress, offset map,
	// checkpoints: Read on the internal topics) and copies only the new
	// records.
	require.NoError(t, producer.ProduceSync(ctx,
		&kgo.Record{Topic: topic, Partition: 0, Value: []byte("after restart")},
		&kgo.Record{Topic: topic, Partition: 1, Value: []byte("after restart")}).FirstErr())
	p2 := (&env{t: t}).start("-c", cfg, "--log.level", "debug", "--web.listen-address", "")
	eventually(t, 30*time.Second, "the new records on the target", func() bool {
		return b.records(t, b.dst, remote) == n+2
	})
	code, vout, verr := runBinary(t, "validate", "-c", cfg)
	require.Equal(t, 0, code, "validate: %s%s", vout, verr)
	require.Contains(t, vout, "sasl.jaas.config = <secret>")
	code, cout, cerr := runBinary(t, "validate", "--connect", "-c", cfg)
	require.Equal(t, 0, code, "validate --connect: %s%s", cout, cerr)
	require.Regexp(t, `(?m)^\s*`+regexp.QuoteMeta(topic)+`\s+3\s+`+regexp.QuoteMeta(remote)+`\s+exists, 3 partitions`, cout)
	require.Equal(t, 0, p2.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")
	require.Equal(t, int64(n+2), b.records(t, b.dst, remote), "nothing copied twice after the restart")

	log := p.out.String() + p2.out.String()
	require.Contains(t, p2.out.String(), "checkpoints started")
	for _, line := range strings.Split(log, "\n") {
		require.NotContains(t, line, "\tERROR\t", "no error with the minimal ACLs")
		require.NotContains(t, strings.ToUpper(line), "AUTHORIZ", "no authorization failure with the minimal ACLs")
	}
	for name, out := range map[string]string{"log": log, "/metrics": metrics, "validate": vout + verr, "validate --connect": cout + cerr} {
		for _, secret := range []string{b.src.userPW, b.dst.userPW, b.adminPW, "ScramLoginModule"} {
			require.NotContains(t, out, secret, "%s shows a secret", name)
		}
	}
}

// testWrongPassword runs a flow whose target password is wrong: the flow
// fails its connectivity check within seconds with an error naming the
// target cluster, and is retried with backoff instead of exiting.
func (b *secureBed) testWrongPassword(t *testing.T) {
	f := b.flow(t)
	f.dstJAAS = jaas(secureUser, "wrong-"+f.id)
	b.expectConnectError(t, f, fmt.Sprintf("cluster %s (%s): SASL authentication failed", f.dst, b.dst.bootstrap), "wrong-"+f.id)
}

// testWrongCA runs a flow whose source trust store holds another CA.
func (b *secureBed) testWrongCA(t *testing.T) {
	f := b.flow(t)
	f.srcCA = b.otherCAPEM
	b.expectConnectError(t, f, fmt.Sprintf("cluster %s (%s): TLS: the broker's certificate is not signed by a trusted CA", f.src, b.src.bootstrap), "")
}

// expectConnectError runs mm2go and `validate --connect` on f's file and
// expects want in both outputs, promptly, and the daemon to retry after
// backoff (not to exit); secret must appear nowhere.
func (b *secureBed) expectConnectError(t *testing.T, f *secureFlow, want, secret string) {
	t.Helper()
	cfg := f.write(t, b, t.TempDir())
	start := time.Now()
	addr := freePort(t)
	p := (&env{t: t}).start("-c", cfg, "--web.listen-address", addr)
	// The error is logged once per 30 s (repeated errors of one cause are
	// counted into the next line); the restarts show that it is retried.
	eventually(t, 20*time.Second, "the connectivity error, and a second attempt", func() bool {
		return strings.Contains(p.out.String(), want) &&
			scrape(t, addr, `mm2go_flow_restarts_total{flow="`+f.src+`->`+f.dst+`"}`) >= 2
	})
	t.Logf("error seen and retried after %s", time.Since(start).Round(time.Millisecond))
	select {
	case <-p.done:
		t.Fatalf("mm2go exited instead of retrying:\n%s", p.out.String())
	default:
	}
	require.Contains(t, p.out.String(), "flow failed; restarting")
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")

	code, out, errOut := runBinary(t, "validate", "--connect", "-c", cfg)
	require.Equal(t, 1, code, "validate --connect: %s%s", out, errOut)
	require.Contains(t, errOut, want)
	if secret != "" {
		require.NotContains(t, p.out.String()+out+errOut, secret)
	}
}

// topicConfig returns the value of a topic's config key, "" if unset or
// unreadable.
func topicConfig(t *testing.T, adm *kadm.Client, topic, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil || len(rc) != 1 || rc[0].Err != nil {
		return ""
	}
	for _, c := range rc[0].Configs {
		if c.Key == key {
			return c.MaybeValue()
		}
	}
	return ""
}

// httpGet returns the body of a 200 answer.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec,noctx // a test URL
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	return string(body)
}

// aclCommand is one `kafka-acls.sh ... --add` line of docs/security.md.
type aclCommand struct {
	line       int
	bootstrap  string
	principal  string
	operations []kadm.ACLOperation
	resource   string // "topic", "group", "cluster", "transactional-id"
	name       string
	pattern    kadm.ACLPattern
}

// parseACLDoc reads every line of the document that starts with
// kafka-acls.sh, substitutes "$VAR" and "${VAR}" from vars and parses the
// options mm2go's ACL list uses.
func parseACLDoc(path string, vars map[string]string) ([]aclCommand, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read acl document: %w", err)
	}
	ops := map[string]kadm.ACLOperation{
		"Read": kadm.OpRead, "Write": kadm.OpWrite, "Create": kadm.OpCreate, "Delete": kadm.OpDelete,
		"Alter": kadm.OpAlter, "Describe": kadm.OpDescribe, "DescribeConfigs": kadm.OpDescribeConfigs,
		"AlterConfigs": kadm.OpAlterConfigs, "IdempotentWrite": kadm.OpIdempotentWrite, "All": kadm.OpAll,
		"ClusterAction": kadm.OpClusterAction,
	}
	varRe := regexp.MustCompile(`\$\{?([A-Z_]+)\}?`)
	var out []aclCommand
	sc := bufio.NewScanner(bytes.NewReader(data))
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "kafka-acls.sh ") {
			continue
		}
		var missing []string
		line = varRe.ReplaceAllStringFunc(line, func(m string) string {
			name := varRe.FindStringSubmatch(m)[1]
			v, ok := vars[name]
			if !ok {
				missing = append(missing, name)
			}
			return v
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("line %d: unknown variables %v", ln, missing)
		}
		c := aclCommand{line: ln, pattern: kadm.ACLPatternLiteral}
		args := strings.Fields(strings.ReplaceAll(line, `"`, ""))[1:]
		add := false
		for i := 0; i < len(args); i++ {
			a := args[i]
			switch a {
			case "--add":
				add = true
				continue
			case "--cluster":
				c.resource = "cluster"
				continue
			}
			if i+1 >= len(args) {
				return nil, fmt.Errorf("line %d: %s needs a value", ln, a)
			}
			i++
			v := args[i]
			switch a {
			case "--bootstrap-server":
				c.bootstrap = v
			case "--command-config":
			case "--allow-principal":
				c.principal = v
			case "--operation":
				op, ok := ops[v]
				if !ok {
					return nil, fmt.Errorf("line %d: unknown operation %q", ln, v)
				}
				c.operations = append(c.operations, op)
			case "--topic", "--group", "--transactional-id":
				c.resource, c.name = strings.TrimPrefix(a, "--"), v
			case "--resource-pattern-type":
				switch v {
				case "prefixed":
					c.pattern = kadm.ACLPatternPrefixed
				case "literal":
				default:
					return nil, fmt.Errorf("line %d: unknown pattern type %q", ln, v)
				}
			default:
				return nil, fmt.Errorf("line %d: unknown option %q", ln, a)
			}
		}
		if !add || c.bootstrap == "" || c.principal == "" || c.resource == "" || len(c.operations) == 0 {
			return nil, fmt.Errorf("line %d: want --add, --bootstrap-server, --allow-principal, a resource and operations", ln)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read acl document: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no kafka-acls.sh lines in %s", path)
	}
	return out, nil
}

// grant creates the ACLs of cmds, each on the cluster its bootstrap names.
func (b *secureBed) grant(t *testing.T, cmds []aclCommand) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range cmds {
		var adm *kadm.Client
		switch c.bootstrap {
		case b.src.bootstrap:
			adm = b.src.adm
		case b.dst.bootstrap:
			adm = b.dst.adm
		default:
			t.Fatalf("docs/security.md line %d: bootstrap %q is neither cluster", c.line, c.bootstrap)
		}
		acl := kadm.NewACLs().Allow(c.principal).AllowHosts().Operations(c.operations...).ResourcePatternType(c.pattern)
		switch c.resource {
		case "topic":
			acl.Topics(c.name)
		case "group":
			acl.Groups(c.name)
		case "transactional-id":
			acl.TransactionalIDs(c.name)
		case "cluster":
			acl.Clusters()
		}
		res, err := adm.CreateACLs(ctx, acl)
		require.NoError(t, err, "docs/security.md line %d", c.line)
		for _, r := range res {
			require.NoError(t, r.Err, "docs/security.md line %d", c.line)
		}
	}
}
