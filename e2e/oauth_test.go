package e2e

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// oauthIDP is a small OpenID provider for the brokers and mm2go: a JWKS
// with one RSA key, and a token endpoint that hands one client (the
// client-credentials grant) JWTs signed with it: subject "admin" (a super
// user of the secure bed), audience "kafka", valid for lifetime.
type oauthIDP struct {
	url              string
	key              *rsa.PrivateKey
	clientID, secret string
	lifetime         time.Duration
	tokens           atomic.Int32 // tokens handed out
}

func newOAuthIDP(t *testing.T) *oauthIDP {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	idp := &oauthIDP{key: key, clientID: "mm2go-oauth", secret: "secret-" + uid(t), lifetime: 8 * time.Second}
	mux := http.NewServeMux()
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, _ *http.Request) {
		enc := base64.RawURLEncoding
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
			"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256",
			"n": enc.EncodeToString(key.N.Bytes()), "e": enc.EncodeToString(big.NewInt(int64(key.E)).Bytes()),
		}}})
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		id, pw, ok := r.BasicAuth()
		if !ok || id != idp.clientID || pw != idp.secret || r.FormValue("grant_type") != "client_credentials" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		now := time.Now()
		tok := idp.sign(t, map[string]any{"sub": "admin", "aud": "kafka", "iat": now.Unix(), "exp": now.Add(idp.lifetime).Unix(), "scope": r.FormValue("scope")})
		idp.tokens.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "bearer", "expires_in": idp.lifetime.Seconds()})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	idp.url = "http://" + ln.Addr().String()
	return idp
}

// sign makes an RS256 JWT of claims.
func (p *oauthIDP) sign(t *testing.T, claims map[string]any) string {
	enc := base64.RawURLEncoding
	header, err := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": "k1"})
	require.NoError(t, err)
	payload, err := json.Marshal(claims)
	require.NoError(t, err)
	signing := enc.EncodeToString(header) + "." + enc.EncodeToString(payload)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, p.key, crypto.SHA256, sum[:])
	require.NoError(t, err)
	return signing + "." + enc.EncodeToString(sig)
}

// oauthJAAS is the sasl.jaas.config of Kafka's OAUTHBEARER login module.
func oauthJAAS(clientID, secret string) string {
	return `org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientId="` + clientID +
		`" clientSecret="` + secret + `" scope="kafka";`
}

// testOAuth copies records between the SASL_SSL listeners of both
// clusters logged in with OAUTHBEARER: tokens of the client-credentials
// grant from the test's provider, which the brokers validate against its
// JWKS. The tokens live 8 s and the brokers re-authenticate sessions when
// they expire, so copying goes on across several refreshes. A wrong
// client secret is one error naming the cluster, retried.
func (b *secureBed) testOAuth(t *testing.T) {
	f := b.flow(t)
	f.mech = "OAUTHBEARER"
	f.srcJAAS, f.dstJAAS = oauthJAAS(b.idp.clientID, b.idp.secret), oauthJAAS(b.idp.clientID, b.idp.secret)
	f.extra = []string{
		"sasl.login.callback.handler.class = org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
		"sasl.oauthbearer.token.endpoint.url = " + b.idp.url + "/token",
		"sasl.login.refresh.min.period.seconds = 1",
		"sasl.login.refresh.buffer.seconds = 1",
	}
	cfg := f.write(t, b, t.TempDir())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic, group := f.topicPrefix()+"oauth", f.groupPrefix()+"oauth"
	remote := f.src + "." + topic
	createTopicOn(t, b.src.adm, topic, 1, nil)
	producer := b.adminClient(t, b.src)
	produced := 0
	produce := func(n int) {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Value: []byte("v" + strconv.Itoa(produced+i))}
		}
		require.NoError(t, producer.ProduceSync(ctx, recs...).FirstErr())
		produced += n
	}
	produce(20)
	committed := kadm.Offsets{}
	committed.Add(kadm.Offset{Topic: topic, Partition: 0, At: 10, LeaderEpoch: -1})
	_, err := b.src.adm.CommitOffsets(ctx, group, committed)
	require.NoError(t, err)

	before := b.idp.tokens.Load()
	p := (&env{t: t}).start("-c", cfg, "--web.listen-address", "")
	eventually(t, time.Minute, "the first records on the target", func() bool { return b.records(t, b.dst, remote) == int64(produced) })
	// Records keep coming for three and a half token lifetimes: a broker
	// closes a session whose token expired unless the client
	// re-authenticated it with a new one, so every connection mm2go keeps
	// open is re-authenticated at least three times.
	start := b.idp.tokens.Load()
	for end := time.Now().Add(7 * b.idp.lifetime / 2); time.Now().Before(end); {
		produce(5)
		time.Sleep(500 * time.Millisecond)
	}
	// At least the copy's two clients (source consumer, target producer)
	// took three new tokens each.
	require.GreaterOrEqual(t, b.idp.tokens.Load()-start, int32(3*2), "tokens refreshed while copying")
	eventually(t, time.Minute, "every record on the target", func() bool { return b.records(t, b.dst, remote) == int64(produced) })
	knock(t, b.dst.adm, group, remote, func(opts ...kgo.Opt) *kgo.Client { return b.adminClient(t, b.dst, opts...) })
	var marker int64
	if fenced() {
		marker = 1
	}
	eventually(t, 30*time.Second, "the group's offset synced to the target", func() bool {
		offs, err := b.dst.adm.FetchOffsets(ctx, group)
		o, ok := offs.Lookup(remote, 0)
		return err == nil && ok && o.At == 10+marker
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")
	out := p.out.String()
	require.NotContains(t, out, "\tERROR\t", "no error while tokens were refreshed")
	require.NotContains(t, out, b.idp.secret)
	t.Logf("%d tokens handed out while copying %d records", b.idp.tokens.Load()-before, produced)

	// A wrong client secret: one error naming the cluster, retried.
	bad := b.flow(t)
	bad.mech, bad.extra = f.mech, f.extra
	bad.srcJAAS, bad.dstJAAS = f.srcJAAS, oauthJAAS(b.idp.clientID, "wrong-"+bad.id)
	b.expectConnectError(t, bad, fmt.Sprintf("cluster %s (%s): connection check failed: OAUTHBEARER token endpoint %s/token: HTTP 401",
		bad.dst, b.dst.bootstrap, b.idp.url), "wrong-"+bad.id)
}
