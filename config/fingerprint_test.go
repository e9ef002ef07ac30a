package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFingerprint checks that a flow's fingerprint is stable across loads
// and changes exactly when one of the flow's effective settings changes,
// including secrets and the contents of TLS files.
func TestFingerprint(t *testing.T) {
	p := newTestPKI(t, []string{"broker"}, nil)
	other := newTestPKI(t, []string{"broker"}, nil)
	base := twoClusters + `
b->a.enabled = true
a.security.protocol = SASL_SSL
a.ssl.truststore.type = PEM
a.ssl.truststore.location = ca.pem
a.sasl.mechanism = PLAIN
a.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="pw1";
`
	fingerprints := func(t *testing.T, text string, ca []byte) map[string]string {
		t.Helper()
		dir := t.TempDir()
		writeFiles(t, dir, map[string][]byte{"ca.pem": ca})
		c, _, err := load(t, text, nil, dir)
		require.NoError(t, err)
		out := map[string]string{}
		for _, f := range c.Flows {
			out[f.Name()] = f.Fingerprint()
		}
		return out
	}
	orig := fingerprints(t, base, p.caPEM)
	require.Equal(t, orig, fingerprints(t, base, p.caPEM), "stable across loads")
	require.NotEqual(t, orig["a->b"], orig["b->a"])
	require.Len(t, orig["a->b"], 64)

	tests := []struct {
		name    string
		text    string
		ca      []byte
		changed []string
	}{
		{"comment and order only", "# comment\n" + strings.Replace(base, "b->a.enabled = true\n", "", 1) + "b->a.enabled = true\n", p.caPEM, nil},
		{"unknown key", base + "xxx = 1\n", p.caPEM, nil},
		{"flow setting", base + "a->b.topics = orders\n", p.caPEM, []string{"a->b"}},
		{"top-level setting", base + "replication.factor = 3\n", p.caPEM, []string{"a->b", "b->a"}},
		{"target worker setting", base + "b.offset.flush.interval.ms = 500\n", p.caPEM, []string{"a->b"}},
		{"client of one cluster", base + "b.producer.linger.ms = 50\n", p.caPEM, []string{"a->b", "b->a"}},
		{"secret", strings.Replace(base, "pw1", "pw2", 1), p.caPEM, []string{"a->b", "b->a"}},
		{"TLS file content", base, other.caPEM, []string{"a->b", "b->a"}},
		{"enabled flag", strings.Replace(base, "b->a.enabled = true", "b->a.enabled = false", 1), p.caPEM, []string{"b->a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fingerprints(t, tt.text, tt.ca)
			var changed []string
			for _, name := range []string{"a->b", "b->a"} {
				if got[name] != orig[name] {
					changed = append(changed, name)
				}
			}
			require.Equal(t, tt.changed, changed)
		})
	}
}

// TestFingerprintHidesSecrets makes sure the text that is hashed holds
// digests, not secret values.
func TestFingerprintHidesSecrets(t *testing.T) {
	c, _ := mustLoad(t, twoClusters+`
a.security.protocol = SASL_PLAINTEXT
a.sasl.mechanism = PLAIN
a.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="topsecret";
`)
	var sb strings.Builder
	c.Flow("a", "b").dump(&sb, true)
	require.NotContains(t, sb.String(), "topsecret")
	require.Contains(t, sb.String(), "sasl.jaas.config = sha256:")
}
