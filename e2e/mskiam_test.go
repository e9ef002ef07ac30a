package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/mm2go/mm2go/config"
)

// TestIntegrationMSKIAMInterop proves that what mm2go sends to Amazon MSK
// for IAM access control is what Amazon's own Java library
// (aws-msk-iam-auth, run by testbed/java) sends, in both forms MSK users
// write in MM2's file: sasl.mechanism=AWS_MSK_IAM with IAMLoginModule, and
// OAUTHBEARER with IAMOAuthBearerLoginCallbackHandler. mm2go's bytes are
// taken off the wire: a client built from the file authenticates to an
// in-process broker that records the SASL exchange. Both sides take the
// same credentials from the environment (the AWS SDKs' default chains).
// Each signature is checked against a reference SigV4 presigning (the AWS
// SDK for Go's signer) at the time its side signed; everything else must be
// equal. What cannot be tested here: a real MSK broker accepting them.
func TestIntegrationMSKIAMInterop(t *testing.T) { firstPassOnly(testMSKIAMInterop)(t) }

func testMSKIAMInterop(t *testing.T) {
	creds := aws.Credentials{AccessKeyID: "AKIDMM2GOINTEROP", SecretAccessKey: "mm2go/interop+secret", SessionToken: "mm2go-session/token=="}
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": creds.AccessKeyID, "AWS_SECRET_ACCESS_KEY": creds.SecretAccessKey,
		"AWS_SESSION_TOKEN": creds.SessionToken, "AWS_REGION": "eu-central-1",
		"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_PROFILE": "",
	} {
		t.Setenv(k, v)
	}
	const host = "b-1.mm2go.abc123.c2.kafka.eu-central-1.amazonaws.com"
	in := newInterop(t)
	var java struct{ Payload, Token string }
	require.NoError(t, json.Unmarshal(in.java(t, "msk-iam", host), &java))

	t.Run("AWS_MSK_IAM", func(t *testing.T) {
		got := saslBytes(t, host, "AWS_MSK_IAM", "software.amazon.msk.auth.iam.IAMLoginModule required;",
			"sasl.client.callback.handler.class = software.amazon.msk.auth.iam.IAMClientCallbackHandler")
		var ours, theirs map[string]string
		require.NoError(t, json.Unmarshal(got, &ours), "%s", got)
		require.NoError(t, json.Unmarshal([]byte(java.Payload), &theirs), "%s", java.Payload)
		require.Equal(t, "900", ours["x-amz-expires"])
		require.Contains(t, javaExpires, theirs["x-amz-expires"])
		for _, p := range []map[string]string{ours, theirs} {
			require.Equal(t, referenceSignature(t, creds, host, p["x-amz-date"], p["x-amz-expires"]), p["x-amz-signature"], "signature of %v", p)
			require.Equal(t, creds.AccessKeyID+"/"+p["x-amz-date"][:8]+"/eu-central-1/kafka-cluster/aws4_request", p["x-amz-credential"])
		}
		require.Equal(t, "mm2go", ours["user-agent"])
		for _, k := range []string{"x-amz-date", "x-amz-signature", "user-agent", "x-amz-credential", "x-amz-expires"} {
			delete(ours, k)
			delete(theirs, k)
		}
		require.Equal(t, theirs, ours)
	})

	t.Run("OAUTHBEARER", func(t *testing.T) {
		got := saslBytes(t, host, "OAUTHBEARER", "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
			"sasl.login.callback.handler.class = software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler")
		// RFC 7628's client first message: n,,\x01auth=Bearer <token>\x01\x01
		_, tok, ok := strings.Cut(string(got), "auth=Bearer ")
		require.True(t, ok, "%q", got)
		tok = strings.TrimRight(tok, "\x01")
		ours, theirs := tokenURL(t, tok), tokenURL(t, java.Token)
		const tokenHost = "kafka.eu-central-1.amazonaws.com"
		require.Equal(t, "900", ours.Query().Get("X-Amz-Expires"))
		require.Contains(t, javaExpires, theirs.Query().Get("X-Amz-Expires"))
		for _, u := range []*url.URL{ours, theirs} {
			require.Equal(t, "https://"+tokenHost, u.Scheme+"://"+u.Host+u.Path, "%s", u)
			q := u.Query()
			require.Equal(t, referenceSignature(t, creds, tokenHost, q.Get("X-Amz-Date"), q.Get("X-Amz-Expires")), q.Get("X-Amz-Signature"), "signature of %s", u)
		}
		// The same URL, byte for byte, but for the time, its validity, the
		// signature and the user agent.
		require.Equal(t, sameShape(theirs.String(), theirs), sameShape(ours.String(), ours))
	})
}

// saslBytes builds the admin client of cluster "msk" from an MM2 file with
// the given SASL settings, lets it connect to host (an in-process broker
// answering for it) and returns the bytes of its first SASLAuthenticate.
func saslBytes(t *testing.T, host, mech, jaas string, extra ...string) []byte {
	t.Helper()
	fake, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(fake.Close)
	var mu sync.Mutex
	var auth []byte
	fake.ControlKey(int16(kmsg.SASLHandshake), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		resp := kreq.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.SupportedMechanisms = []string{mech}
		return resp, nil, true
	})
	fake.ControlKey(int16(kmsg.SASLAuthenticate), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		mu.Lock()
		if auth == nil {
			auth = append([]byte{}, kreq.(*kmsg.SASLAuthenticateRequest).SASLAuthBytes...)
		}
		mu.Unlock()
		resp := kreq.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		if mech == "AWS_MSK_IAM" {
			resp.SASLAuthBytes = []byte(`{"version":"2020_10_22","request-id":"mm2go-test"}`)
		}
		return resp, nil, true
	})
	file := strings.Join(append([]string{
		"clusters = msk, other",
		"msk.bootstrap.servers = " + host + ":9098",
		"other.bootstrap.servers = 127.0.0.1:1",
		"msk->other.enabled = true",
		"msk.security.protocol = SASL_PLAINTEXT",
		"msk.sasl.mechanism = " + mech,
		"msk.sasl.jaas.config = " + jaas,
	}, prefixed("msk.", extra)...), "\n") + "\n"
	cfg, _, err := config.Parse([]byte(file), t.TempDir())
	require.NoError(t, err)
	addr := fake.ListenAddrs()[0]
	var d net.Dialer
	opts := append(cfg.Flow("msk", "other").Client(config.RoleSourceAdmin).Opts(),
		kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}))
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.Ping(ctx))
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, auth, "no SASLAuthenticate")
	return auth
}

func prefixed(p string, lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = p + l
	}
	return out
}

// referenceSignature presigns MSK's connect request for host at date
// (yyyymmddThhmmssZ) with the AWS SDK for Go's SigV4 signer.
func referenceSignature(t *testing.T, creds aws.Credentials, host, date, expires string) string {
	t.Helper()
	at, err := time.Parse("20060102T150405Z", date)
	require.NoError(t, err, "X-Amz-Date %q", date)
	region := strings.Split(strings.TrimSuffix(host, ".amazonaws.com"), ".")
	req, err := http.NewRequest(http.MethodGet, "https://"+host+"/?Action=kafka-cluster%3AConnect&X-Amz-Expires="+expires, nil)
	require.NoError(t, err)
	signed, _, err := v4.NewSigner().PresignHTTP(context.Background(), creds, req,
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "kafka-cluster", region[len(region)-1], at)
	require.NoError(t, err)
	u, err := url.Parse(signed)
	require.NoError(t, err)
	return u.Query().Get("X-Amz-Signature")
}

// tokenURL decodes an MSK IAM OAUTHBEARER token.
func tokenURL(t *testing.T, tok string) *url.URL {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	require.NoError(t, err, "token %q", tok)
	u, err := url.Parse(string(raw))
	require.NoError(t, err)
	return u
}

// javaExpires are the validities, in seconds, Amazon's Java library signs
// with: 15 minutes from when it starts, counted in whole seconds when it
// signs, so 899 when a second ended in between. mm2go signs 900.
var javaExpires = []string{"899", "900"}

// sameShape replaces the values of X-Amz-Date, X-Amz-Expires,
// X-Amz-Signature and User-Agent in raw (u's string) with their names.
func sameShape(raw string, u *url.URL) string {
	q := u.Query()
	for _, k := range []string{"X-Amz-Date", "X-Amz-Expires", "X-Amz-Signature", "User-Agent"} {
		raw = strings.Replace(raw, k+"="+strings.ReplaceAll(url.QueryEscape(q.Get(k)), "+", "%20"), k+"=<"+k+">", 1)
	}
	return raw
}
