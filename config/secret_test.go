package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// TestSecretNeverPrints checks every way a Secret can be printed: directly,
// inside a struct, through encoding/json, log/slog and zap.
func TestSecretNeverPrints(t *testing.T) {
	const plain = "hunter2-do-not-print"
	s := Secret(plain)
	holder := struct {
		User string
		Pass Secret
		Ptr  *Secret
	}{User: "mm2", Pass: s, Ptr: &s}

	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%10s", "%-8v", "%d"} {
		t.Run(verb, func(t *testing.T) {
			for _, v := range []any{s, holder, &holder, []Secret{s}, map[string]Secret{"k": s}} {
				out := fmt.Sprintf(verb, v)
				require.NotContains(t, out, plain)
				require.NotContains(t, out, fmt.Sprintf("%x", plain))
				require.Contains(t, out, "<secret>")
			}
		})
	}
	t.Run("String and GoString", func(t *testing.T) {
		require.Equal(t, "<secret>", s.String())
		require.Equal(t, "<secret>", s.GoString())
		require.Equal(t, plain, s.Reveal())
	})
	t.Run("json", func(t *testing.T) {
		out, err := json.Marshal(holder)
		require.NoError(t, err)
		require.JSONEq(t, `{"User":"mm2","Pass":"<secret>","Ptr":"<secret>"}`, string(out))
		text, err := s.MarshalText()
		require.NoError(t, err)
		require.Equal(t, "<secret>", string(text))
	})
	t.Run("slog", func(t *testing.T) {
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("msg", "password", s, "holder", holder)
		require.NotContains(t, buf.String(), plain)
		require.Contains(t, buf.String(), `"password":"<secret>"`)
	})
	t.Run("zap", func(t *testing.T) {
		var buf bytes.Buffer
		core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zap.DebugLevel)
		zap.New(core).Info("msg", zap.Any("password", s), zap.Stringer("s", s), zap.Any("holder", holder), zap.Reflect("r", holder))
		require.NotContains(t, buf.String(), plain)
		require.Contains(t, buf.String(), `"password":"<secret>"`)
		require.Contains(t, buf.String(), `"s":"<secret>"`)
		require.Contains(t, buf.String(), `"Pass":"<secret>"`)
	})
}

// TestSecretsStayOutOfOutput loads configs whose secrets appear in valid
// and invalid values and checks that no error, warning, dump or Props
// shows them.
func TestSecretsStayOutOfOutput(t *testing.T) {
	const pw = "Pa55w0rd-LEAK"
	tests := []struct {
		name string
		text string
	}{
		{"valid PLAIN", twoClusters + `
security.protocol = SASL_PLAINTEXT
sasl.mechanism = PLAIN
sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="` + pw + `";
a.ssl.truststore.password = ` + pw + `
`},
		{"module mismatch", twoClusters + `
security.protocol = SASL_PLAINTEXT
sasl.mechanism = SCRAM-SHA-512
sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="` + pw + `";
`},
		{"unterminated", twoClusters + `
a.security.protocol = SASL_SSL
a.sasl.mechanism = PLAIN
a.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="` + pw + `"
`},
		{"numeric password", twoClusters + `
a.security.protocol = SASL_SSL
a.sasl.mechanism = PLAIN
a.producer.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required username=u password=12345` + pw + `;
`},
		{"bad key password type", twoClusters + `
b.producer.ssl.key.password = ` + pw + `
b.admin.password = ` + pw + `
`},
		{"password with PEM trust store", twoClusters + `
b.security.protocol = SSL
b.ssl.truststore.type = PEM
b.ssl.truststore.certificates = -----BEGIN CERTIFICATE----- AAAA -----END CERTIFICATE-----
b.ssl.truststore.password = ` + pw + `
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ws, err := load(t, tt.text, nil, t.TempDir())
			var out strings.Builder
			for _, w := range ws {
				out.WriteString(w.String() + "\n")
			}
			if err != nil {
				out.WriteString(err.Error())
			} else {
				out.WriteString(c.Dump())
				for _, f := range c.Flows {
					for _, r := range Roles() {
						fmt.Fprintf(&out, "%v %+v %#v\n", f.Client(r).Props(), f.Client(r), f)
					}
				}
			}
			require.NotContains(t, out.String(), pw)
		})
	}
}

func TestMistypedSecretKeysAreMasked(t *testing.T) {
	for _, k := range []string{"a.producer.ssl.key.passwrd", "a.consumer.sasl.jaas.confg", "a.admin.some.token", "a.client.secretkey"} {
		require.True(t, isSecretKey(k), k)
	}
	for _, k := range []string{"a.producer.linger.ms", "a.ssl.truststore.location", "a.bootstrap.servers"} {
		require.False(t, isSecretKey(k), k)
	}
}
