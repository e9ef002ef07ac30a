package config

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
)

// OAUTHBEARER as Kafka's login module and callback handlers do it:
// OAuthBearerLoginCallbackHandler's client-credentials grant at
// sasl.oauthbearer.token.endpoint.url (clientId, clientSecret and scope from
// the JAAS options), or the unsecured development tokens of
// OAuthBearerUnsecuredLoginCallbackHandler (unsecuredLoginStringClaim_sub).
// The token is kept and handed to every new connection and
// re-authentication until its refresh time (sasl.login.refresh.*).

// oauthLoginModule is the JAAS login module of OAUTHBEARER.
const oauthLoginModule = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"

// oauthRefresh is when a token is fetched again, as Kafka's
// ExpiringCredentialRefreshingLogin decides it.
type oauthRefresh struct {
	factor    float64       // sasl.login.refresh.window.factor (0.8)
	jitter    float64       // sasl.login.refresh.window.jitter (0.05)
	minPeriod time.Duration // sasl.login.refresh.min.period.seconds (60)
	buffer    time.Duration // sasl.login.refresh.buffer.seconds (300)
}

// at returns when a token issued at issued and expiring at expiry is
// refreshed: at factor (plus up to jitter) of its lifetime, no sooner than
// minPeriod after it was issued unless that leaves less than buffer before
// it expires, and never after it expires.
func (r oauthRefresh) at(issued, expiry time.Time, jitter float64) time.Time {
	life := expiry.Sub(issued)
	at := issued.Add(time.Duration(float64(life) * (r.factor + r.jitter*jitter)))
	if first := issued.Add(r.minPeriod); at.Before(first) {
		at = first
	}
	if last := expiry.Add(-r.buffer); at.After(last) {
		at = last
	}
	if at.Before(issued) {
		at = issued
	}
	return at
}

// oauthSource fetches and keeps the token.
type oauthSource struct {
	endpoint   string // token endpoint; "" for unsecured tokens
	clientID   string
	secret     Secret
	scope      string
	unsecured  map[string]string // unsecured token claims (sub, ...)
	lifetime   time.Duration     // unsecured token lifetime
	extensions map[string]string
	refresh    oauthRefresh
	http       *http.Client

	mu        sync.Mutex
	token     string
	expiry    time.Time
	refreshAt time.Time
	now       func() time.Time
}

// mechanism is the SASL mechanism of s.
func (s *oauthSource) mechanism() sasl.Mechanism {
	return oauth.Oauth(func(ctx context.Context) (oauth.Auth, error) {
		tok, err := s.get(ctx)
		if err != nil {
			return oauth.Auth{}, err
		}
		return oauth.Auth{Token: tok, Extensions: s.extensions}, nil
	})
}

// get returns the kept token, or a new one once the kept one is due for
// refresh. A failed refresh keeps handing out the old token while it is
// valid.
func (s *oauthSource) get(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.token != "" && now.Before(s.refreshAt) {
		return s.token, nil
	}
	tok, expiry, err := s.fetch(ctx, now)
	if err != nil {
		if s.token != "" && now.Before(s.expiry) {
			return s.token, nil
		}
		return "", err
	}
	s.token, s.expiry = tok, expiry
	s.refreshAt = s.refresh.at(now, expiry, rand.Float64())
	return tok, nil
}

// fetch gets a new token and its expiry.
func (s *oauthSource) fetch(ctx context.Context, now time.Time) (string, time.Time, error) {
	if s.endpoint == "" {
		return s.unsecuredToken(now)
	}
	form := url.Values{"grant_type": {"client_credentials"}}
	if s.scope != "" {
		form.Set("scope", s.scope)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("OAUTHBEARER token request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(s.clientID), url.QueryEscape(s.secret.Reveal()))
	resp, err := s.http.Do(req)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("OAUTHBEARER token endpoint %s: %w", s.endpoint, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("OAUTHBEARER token endpoint %s: %w", s.endpoint, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", time.Time{}, fmt.Errorf("OAUTHBEARER token endpoint %s: HTTP %d (client id %q)", s.endpoint, resp.StatusCode, s.clientID)
	}
	var tr struct {
		AccessToken string  `json:"access_token"`
		ExpiresIn   float64 `json:"expires_in"`
	}
	if err := json.Unmarshal(body, &tr); err != nil || tr.AccessToken == "" {
		return "", time.Time{}, fmt.Errorf("OAUTHBEARER token endpoint %s: no access_token in the response", s.endpoint)
	}
	expiry, ok := jwtExpiry(tr.AccessToken)
	if !ok {
		if tr.ExpiresIn <= 0 {
			return "", time.Time{}, fmt.Errorf("OAUTHBEARER token endpoint %s: the token has neither an exp claim nor expires_in", s.endpoint)
		}
		expiry = now.Add(time.Duration(tr.ExpiresIn * float64(time.Second)))
	}
	return tr.AccessToken, expiry, nil
}

// unsecuredToken makes a token as OAuthBearerUnsecuredLoginCallbackHandler
// does: an unsigned JWT ("alg": "none") with the configured claims.
func (s *oauthSource) unsecuredToken(now time.Time) (string, time.Time, error) {
	claims := map[string]any{"iat": now.Unix(), "exp": now.Add(s.lifetime).Unix()}
	for k, v := range s.unsecured {
		claims[k] = v
	}
	header, _ := json.Marshal(map[string]string{"alg": "none"})
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", time.Time{}, err
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString(header) + "." + enc.EncodeToString(payload) + ".", now.Add(s.lifetime), nil
}

// jwtExpiry reads the exp claim of a JWT without verifying it (the broker
// does); ok is false when the token is no JWT or has none.
func jwtExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	sec := int64(*claims.Exp)
	return time.Unix(sec, 0), true
}

// oauthMechanism builds OAUTHBEARER from the JAAS options and the
// sasl.oauthbearer.* and sasl.login.* keys.
func (b *clientBuilder) oauthMechanism(jaasKey string, options map[string]string) (sasl.Mechanism, bool) {
	ok := true
	fail := func(key, format string, args ...any) {
		b.p.probs.errorf(key, format, args...)
		ok = false
	}
	get := b.setProp
	seconds := func(k string, def time.Duration) time.Duration {
		e, found := get(k)
		if !found {
			return def
		}
		n, err := strconv.ParseFloat(javaTrim(e.value), 64)
		if err != nil || n < 0 {
			fail(e.origin, "not a number of seconds (got %q, want a number >= 0)", e.value)
			return def
		}
		return time.Duration(n * float64(time.Second))
	}
	fraction := func(k string, def, lo, hi float64) float64 {
		e, found := get(k)
		if !found {
			return def
		}
		n, err := strconv.ParseFloat(javaTrim(e.value), 64)
		if err != nil || n < lo || n > hi {
			fail(e.origin, "out of range (got %q, want %g..%g)", e.value, lo, hi)
			return def
		}
		return n
	}
	s := &oauthSource{
		refresh: oauthRefresh{
			factor:    fraction("sasl.login.refresh.window.factor", 0.8, 0.5, 1.0),
			jitter:    fraction("sasl.login.refresh.window.jitter", 0.05, 0, 0.25),
			minPeriod: seconds("sasl.login.refresh.min.period.seconds", 60*time.Second),
			buffer:    seconds("sasl.login.refresh.buffer.seconds", 300*time.Second),
		},
		extensions: map[string]string{},
		unsecured:  map[string]string{},
		now:        time.Now,
	}
	b.c.oauth = s
	connect := time.Duration(0)
	if e, found := get("sasl.login.connect.timeout.ms"); found {
		if n, err := strconv.Atoi(javaTrim(e.value)); err == nil && n > 0 {
			connect = time.Duration(n) * time.Millisecond
		} else {
			fail(e.origin, "not a timeout (got %q, want milliseconds > 0)", e.value)
		}
	}
	read := 10 * time.Second
	if e, found := get("sasl.login.read.timeout.ms"); found {
		if n, err := strconv.Atoi(javaTrim(e.value)); err == nil && n > 0 {
			read = time.Duration(n) * time.Millisecond
		} else {
			fail(e.origin, "not a timeout (got %q, want milliseconds > 0)", e.value)
		}
	}
	s.http = &http.Client{Timeout: connect + read}
	for k, v := range options {
		switch {
		case strings.HasPrefix(k, "extension_"):
			s.extensions[strings.TrimPrefix(k, "extension_")] = v
		case strings.HasPrefix(k, "unsecuredLoginStringClaim_"):
			s.unsecured[strings.TrimPrefix(k, "unsecuredLoginStringClaim_")] = v
		}
	}
	if e, found := get("sasl.login.callback.handler.class"); found {
		switch javaTrim(e.value) {
		case "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
			"org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler":
		default:
			fail(e.origin, "unsupported login callback handler (got %q, want Kafka's org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler)", e.value)
		}
	}
	if e, found := get("sasl.oauthbearer.token.endpoint.url"); found {
		u, err := url.Parse(javaTrim(e.value))
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			fail(e.origin, "not an http(s) URL (got %q, want the token endpoint of the OAuth provider)", e.value)
		}
		s.endpoint = javaTrim(e.value)
		s.clientID, s.scope = options["clientId"], options["scope"]
		s.secret = Secret(options["clientSecret"])
		if s.clientID == "" || s.secret == "" {
			fail(jaasKey, "missing clientId or clientSecret option (got %s, want %s required clientId=\"...\" clientSecret=\"...\" [scope=\"...\"];)", secretMask, oauthLoginModule)
		}
		return s.mechanism(), ok
	}
	if s.unsecured["sub"] == "" {
		fail(jaasKey, "no token source (got no sasl.oauthbearer.token.endpoint.url and no unsecuredLoginStringClaim_sub option, want the token endpoint with clientId and clientSecret, or unsecured development tokens)")
		return nil, false
	}
	s.lifetime = time.Hour
	if v, found := options["unsecuredLoginLifetimeSeconds"]; found {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			fail(jaasKey, "unsecuredLoginLifetimeSeconds is not a number of seconds > 0")
		} else {
			s.lifetime = time.Duration(n) * time.Second
		}
	}
	return s.mechanism(), ok
}
