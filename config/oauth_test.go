package config

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOAuthRefreshTime(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	def := oauthRefresh{factor: 0.8, jitter: 0.05, minPeriod: 60 * time.Second, buffer: 300 * time.Second}
	for _, tc := range []struct {
		name   string
		r      oauthRefresh
		life   time.Duration
		jitter float64
		want   time.Duration // after issue
	}{
		{"an hour's token at 80%", def, time.Hour, 0, 48 * time.Minute},
		{"jitter adds up to 5%", def, time.Hour, 1, 51 * time.Minute},
		{"the buffer before expiry wins", def, 20 * time.Minute, 0, 15 * time.Minute},
		{"no sooner than the minimum period", oauthRefresh{factor: 0.8, minPeriod: time.Minute}, 30 * time.Second, 0, 30 * time.Second},
		{"a short token with short settings", oauthRefresh{factor: 0.8, minPeriod: time.Second, buffer: time.Second}, 10 * time.Second, 0, 8 * time.Second},
		{"never before it was issued", def, 2 * time.Minute, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, t0.Add(tc.want), tc.r.at(t0, t0.Add(tc.life), tc.jitter))
		})
	}
}

// tokenServer is a client-credentials token endpoint: it checks the client
// and hands out JWT-shaped tokens with exp = now + life.
type tokenServer struct {
	*httptest.Server
	hits atomic.Int32
	fail atomic.Bool
}

func newTokenServer(t *testing.T, clientID, secret string, life time.Duration) *tokenServer {
	ts := &tokenServer{}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.hits.Add(1)
		id, pw, ok := r.BasicAuth()
		if ts.fail.Load() || !ok || id != clientID || pw != secret || r.FormValue("grant_type") != "client_credentials" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		claims, _ := json.Marshal(map[string]any{"sub": clientID, "scope": r.FormValue("scope"), "exp": time.Now().Add(life).Unix()})
		tok := "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString(claims) + ".sig"
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "bearer", "expires_in": life.Seconds()})
	}))
	t.Cleanup(ts.Close)
	return ts
}

func oauthJAAS(opts string) string {
	return "a.sasl.jaas.config = " + oauthLoginModule + " required " + opts + ";\n"
}

func TestOAuthClientCredentials(t *testing.T) {
	ts := newTokenServer(t, "mm2go", "s3cret", time.Hour)
	base := twoClusters + "a.security.protocol = SASL_PLAINTEXT\na.sasl.mechanism = OAUTHBEARER\n" +
		"a.sasl.login.callback.handler.class = org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
	c, ws, err := load(t, base+"a.sasl.oauthbearer.token.endpoint.url = "+ts.URL+"\n"+oauthJAAS(`clientId="mm2go" clientSecret="s3cret" scope="kafka"`), nil, t.TempDir())
	require.NoError(t, err)
	for _, w := range ws {
		require.NotContains(t, w.Key, "sasl.", "no warning about the OAUTHBEARER keys: %s: %s", w.Key, w.Message)
	}
	cl := c.Flow("a", "b").Client(RoleSourceConsumer)
	require.Equal(t, SASLOAuthBearer, cl.SASLMechanism)
	require.NotContains(t, c.Dump(), "s3cret")

	// The same token for every session until its refresh time.
	src := oauthSourceOf(t, c)
	now := time.Now()
	src.now = func() time.Time { return now }
	tok, err := src.get(context.Background())
	require.NoError(t, err)
	require.Contains(t, tok, ".")
	again, err := src.get(context.Background())
	require.NoError(t, err)
	require.Equal(t, tok, again)
	require.EqualValues(t, 1, ts.hits.Load())
	// Past its refresh time (80-85% of an hour), a new one.
	now = now.Add(52 * time.Minute)
	_, err = src.get(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 2, ts.hits.Load())
	// A failed refresh keeps the token while it is valid (the server's
	// tokens expire an hour after the real time: 8 minutes after this one
	// was fetched on the test's clock, refreshed 5 minutes before that),
	// then fails.
	ts.fail.Store(true)
	now = now.Add(4 * time.Minute)
	kept, err := src.get(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, kept)
	require.EqualValues(t, 3, ts.hits.Load(), "a refresh was tried")
	now = now.Add(5 * time.Minute)
	_, err = src.get(context.Background())
	require.ErrorContains(t, err, "HTTP 401")
	require.ErrorContains(t, err, `client id "mm2go"`)
	require.NotContains(t, err.Error(), "s3cret")
}

// oauthSourceOf returns the token source of the source consumer.
func oauthSourceOf(t *testing.T, c *Config) *oauthSource {
	t.Helper()
	cl := c.Flow("a", "b").Client(RoleSourceConsumer)
	require.NotNil(t, cl.oauth)
	return cl.oauth
}

func TestOAuthUnsecuredTokens(t *testing.T) {
	c, _, err := load(t, twoClusters+"a.security.protocol = SASL_PLAINTEXT\na.sasl.mechanism = OAUTHBEARER\n"+
		oauthJAAS(`unsecuredLoginStringClaim_sub="alice" unsecuredLoginLifetimeSeconds="120" extension_traceId="x1"`), nil, t.TempDir())
	require.NoError(t, err)
	src := oauthSourceOf(t, c)
	tok, err := src.get(context.Background())
	require.NoError(t, err)
	parts := strings.Split(tok, ".")
	require.Len(t, parts, 3)
	require.Empty(t, parts[2], "unsigned")
	header, err := base64.RawURLEncoding.DecodeString(parts[0])
	require.NoError(t, err)
	require.JSONEq(t, `{"alg":"none"}`, string(header))
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims map[string]any
	require.NoError(t, json.Unmarshal(payload, &claims))
	require.Equal(t, "alice", claims["sub"])
	require.InDelta(t, 120, claims["exp"].(float64)-claims["iat"].(float64), 0)
	require.Equal(t, map[string]string{"traceId": "x1"}, src.extensions)
}

func TestOAuthErrors(t *testing.T) {
	base := twoClusters + "a.security.protocol = SASL_PLAINTEXT\na.sasl.mechanism = OAUTHBEARER\n"
	for _, tc := range []struct{ name, extra, want string }{
		{"no token source", oauthJAAS(""), "a.sasl.jaas.config: no token source"},
		{"no client secret", "a.sasl.oauthbearer.token.endpoint.url = https://idp.example/token\n" + oauthJAAS(`clientId="x"`),
			"a.sasl.jaas.config: missing clientId or clientSecret option"},
		{"not a URL", "a.sasl.oauthbearer.token.endpoint.url = idp.example/token\n" + oauthJAAS(`clientId="x" clientSecret="y"`),
			`a.sasl.oauthbearer.token.endpoint.url: not an http(s) URL (got "idp.example/token"`},
		{"another handler", "a.sasl.login.callback.handler.class = com.example.TokenHandler\n" + oauthJAAS(""),
			"a.sasl.login.callback.handler.class: unsupported login callback handler"},
		{"a refresh factor out of range", "a.sasl.login.refresh.window.factor = 2\n" + oauthJAAS(`unsecuredLoginStringClaim_sub="a"`),
			`a.sasl.login.refresh.window.factor: out of range (got "2", want 0.5..1)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := load(t, base+tc.extra, nil, t.TempDir())
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), `"y"`)
		})
	}
}
