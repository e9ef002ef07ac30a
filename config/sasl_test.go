package config

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
)

func TestParseJAAS(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		module  string
		options map[string]string
		err     string
	}{
		{name: "plain", in: `org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="s3cret";`,
			module: plainLoginModule, options: map[string]string{"username": "alice", "password": "s3cret"}},
		{name: "unquoted words", in: `org.apache.kafka.common.security.scram.ScramLoginModule REQUIRED username=alice password=s3cret-x_y$z;`,
			module: scramLoginModule, options: map[string]string{"username": "alice", "password": "s3cret-x_y$z"}},
		{name: "escapes", in: `M required username="a\"b" password="c\\d\te\101";`,
			module: "M", options: map[string]string{"username": `a"b`, "password": "c\\d\teA"}},
		{name: "single quotes and comments", in: "M optional /* note */ username='u' // trailing\n password=\"p;=\";",
			module: "M", options: map[string]string{"username": "u", "password": "p;="}},
		{name: "token auth", in: `M required username="u" password="p" tokenauth="true";`,
			module: "M", options: map[string]string{"username": "u", "password": "p", "tokenauth": "true"}},
		{name: "no options", in: `M sufficient;`, module: "M", options: map[string]string{}},
		{name: "missing semicolon", in: `M required username="u" password="p"`, err: "not terminated by a semicolon"},
		{name: "numeric value", in: `M required username="u" password=123;`, err: `value not specified for option "password"`},
		{name: "missing value", in: `M required username=;`, err: `value not specified for option "username"`},
		{name: "missing equals", in: `M required username "u";`, err: `value not specified for option "username"`},
		{name: "bad flag", in: `M mandatory username="u";`, err: "invalid login module control flag"},
		{name: "no flag", in: `M`, err: "control flag not specified"},
		{name: "empty", in: `  `, err: "login module not specified"},
		{name: "only a comment", in: `/* nothing */`, err: "login module not specified"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entries, err := parseJAAS(tt.in)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Len(t, entries, 1)
			require.Equal(t, tt.module, entries[0].module)
			require.Equal(t, tt.options, entries[0].options)
		})
	}
	entries, err := parseJAAS(`A required; B optional x="y";`)
	require.NoError(t, err)
	require.Len(t, entries, 2, "two modules parse; the client then rejects them")
}

// TestSASLMechanisms checks which mechanism each supported configuration
// builds and the error for each unsupported one.
func TestSASLMechanisms(t *testing.T) {
	jaas := func(module string) string {
		return module + ` required username="mm2" password="pw";`
	}
	tests := []struct {
		name  string
		extra string
		mech  SASLMechanism
		err   string
	}{
		{"plain", "a.sasl.mechanism = PLAIN\na.sasl.jaas.config = " + jaas(plainLoginModule), SASLPlain, ""},
		{"scram 256", "a.sasl.mechanism = SCRAM-SHA-256\na.sasl.jaas.config = " + jaas(scramLoginModule), SASLScramSHA256, ""},
		{"scram 512", "a.sasl.mechanism = SCRAM-SHA-512\na.sasl.jaas.config = " + jaas(scramLoginModule), SASLScramSHA512, ""},
		{"gssapi default", "a.sasl.jaas.config = " + jaas(plainLoginModule), "",
			"a.sasl.jaas.config: login module does not match sasl.mechanism GSSAPI (got \"org.apache.kafka.common.security.plain.PlainLoginModule\", want com.sun.security.auth.module.Krb5LoginModule); sasl.mechanism is unset, and Kafka's default is GSSAPI"},
		{"oauthbearer with another module", "a.sasl.mechanism = OAUTHBEARER\na.sasl.jaas.config = " + jaas(plainLoginModule), "",
			"a.sasl.jaas.config: login module does not match sasl.mechanism OAUTHBEARER"},
		{"unknown", "a.sasl.mechanism = NTLM\na.sasl.jaas.config = " + jaas(plainLoginModule), "",
			`a.sasl.mechanism: unknown SASL mechanism (got "NTLM"`},
		{"mismatch", "a.sasl.mechanism = SCRAM-SHA-256\na.sasl.jaas.config = " + jaas(plainLoginModule), "",
			"a.sasl.jaas.config: login module does not match sasl.mechanism SCRAM-SHA-256"},
		{"no jaas", "a.sasl.mechanism = PLAIN", "", "a.sasl.jaas.config: missing for SASL mechanism PLAIN"},
		{"no password", "a.sasl.mechanism = PLAIN\na.sasl.jaas.config = " + plainLoginModule + ` required username="u";`, "",
			"a.sasl.jaas.config: missing username or password option (got <secret>"},
		{"two modules", "a.sasl.mechanism = PLAIN\na.sasl.jaas.config = " + jaas(plainLoginModule) + " " + jaas(plainLoginModule), "",
			"a.sasl.jaas.config: malformed JAAS config: 2 login modules, want exactly one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := twoClusters + "a.security.protocol = SASL_PLAINTEXT\n" + tt.extra + "\n"
			if tt.err != "" {
				require.Contains(t, loadErr(t, text), tt.err)
				return
			}
			c, _ := mustLoad(t, text)
			cl := c.Flow("a", "b").Client(RoleSourceConsumer)
			require.Equal(t, tt.mech, cl.SASLMechanism)
			mechs := newKgo(t, cl).OptValue(kgo.SASL).([]sasl.Mechanism)
			require.Len(t, mechs, 1)
			require.Equal(t, string(tt.mech), mechs[0].Name())
			// The mechanism carries the parsed credentials: PLAIN's first
			// message is "\x00user\x00pass".
			if tt.mech == SASLPlain {
				_, msg, err := mechs[0].Authenticate(context.Background(), "a1:9092")
				require.NoError(t, err)
				require.Equal(t, "\x00mm2\x00pw", string(msg))
			}
			require.Empty(t, c.Flow("a", "b").Client(RoleTargetConsumer).SASLMechanism, "cluster b has no SASL")
		})
	}
}
