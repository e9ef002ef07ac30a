package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/stretchr/testify/require"
)

const testKrb5Conf = `[libdefaults]
 default_realm = EXAMPLE.COM
[realms]
 EXAMPLE.COM = {
  kdc = 127.0.0.1:88
 }
`

// kerberosFiles writes krb5.conf and a keytab of mm2go@EXAMPLE.COM into a
// new directory.
func kerberosFiles(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	kt := keytab.New()
	require.NoError(t, kt.AddEntry("mm2go", "EXAMPLE.COM", "pw", time.Now(), 1, etypeID.AES256_CTS_HMAC_SHA1_96))
	data, err := kt.Marshal()
	require.NoError(t, err)
	writeFiles(t, dir, map[string][]byte{"krb5.conf": []byte(testKrb5Conf), "mm2go.keytab": data, "junk.keytab": []byte("not a keytab")})
	return dir
}

func gssapiFile(jaas string, extra ...string) string {
	return twoClusters + "a.security.protocol = SASL_PLAINTEXT\na.sasl.mechanism = GSSAPI\n" +
		"a.sasl.jaas.config = " + krb5LoginModule + " required " + jaas + ";\n" + strings.Join(extra, "\n") + "\n"
}

func TestGSSAPIConfig(t *testing.T) {
	dir := kerberosFiles(t)
	keytab := `useKeyTab=true storeKey=true keyTab="` + filepath.Join(dir, "mm2go.keytab") + `" principal="mm2go@EXAMPLE.COM"`
	service := "a.sasl.kerberos.service.name = kafka"
	krb5 := map[string]string{"KRB5_CONFIG": filepath.Join(dir, "krb5.conf")}
	for _, tt := range []struct {
		name, file string
		env        map[string]string
		err        string
	}{
		{name: "keytab", file: gssapiFile(keytab, service), env: krb5},
		{name: "principal in the default realm", file: gssapiFile(strings.Replace(keytab, "mm2go@EXAMPLE.COM", "mm2go", 1), service), env: krb5},
		{name: "service name in JAAS", file: gssapiFile(keytab + ` serviceName="kafka"`), env: krb5},
		{name: "krb5.conf from KAFKA_OPTS", file: gssapiFile(keytab, service),
			env: map[string]string{"KAFKA_OPTS": "-Xmx1g -Djava.security.krb5.conf=" + filepath.Join(dir, "krb5.conf")}},
		{name: "ticket cache", file: gssapiFile(`useTicketCache=true`, service), env: krb5},
		{name: "no service name", file: gssapiFile(keytab), env: krb5, err: "a.sasl.kerberos.service.name: missing for SASL mechanism GSSAPI"},
		{name: "no krb5.conf", file: gssapiFile(keytab, service), env: map[string]string{"KRB5_CONFIG": filepath.Join(dir, "nope.conf")},
			err: "read krb5.conf " + filepath.Join(dir, "nope.conf") + " (KRB5_CONFIG)"},
		{name: "no credentials", file: gssapiFile(`storeKey=true`, service), env: krb5, err: "no Kerberos credentials"},
		{name: "keytab without principal", file: gssapiFile(`useKeyTab=true keyTab="`+filepath.Join(dir, "mm2go.keytab")+`"`, service), env: krb5,
			err: "useKeyTab=true needs keyTab and principal"},
		{name: "keytab missing", file: gssapiFile(strings.Replace(keytab, "mm2go.keytab", "other.keytab", 1), service), env: krb5,
			err: "read keytab"},
		{name: "not a keytab", file: gssapiFile(strings.Replace(keytab, "mm2go.keytab", "junk.keytab", 1), service), env: krb5,
			err: "keytab " + filepath.Join(dir, "junk.keytab")},
		{name: "another principal's keytab", file: gssapiFile(strings.Replace(keytab, "mm2go@", "other@", 1), service), env: krb5,
			err: "holds no key of other@EXAMPLE.COM"},
		{name: "unknown option", file: gssapiFile(keytab+` keytab="x"`, service), env: krb5, err: "unknown Krb5LoginModule option keytab"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, ws, err := load(t, tt.file, tt.env, t.TempDir())
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			for _, w := range ws {
				require.NotEqual(t, LevelWarn, w.Level, "%s: %s", w.Key, w.Message)
			}
			require.Equal(t, SASLGSSAPI, c.Flow("a", "b").Client(RoleSourceConsumer).SASLMechanism)
		})
	}
}

// TestGSSAPIFingerprint: a new keytab restarts the flows that use it (its
// digest is part of the flow's fingerprint).
func TestGSSAPIFingerprint(t *testing.T) {
	dir := kerberosFiles(t)
	file := gssapiFile(`useKeyTab=true keyTab="`+filepath.Join(dir, "mm2go.keytab")+`" principal="mm2go"`, "a.sasl.kerberos.service.name = kafka")
	env := map[string]string{"KRB5_CONFIG": filepath.Join(dir, "krb5.conf")}
	c1, _, err := load(t, file, env, t.TempDir())
	require.NoError(t, err)
	kt := keytab.New()
	require.NoError(t, kt.AddEntry("mm2go", "EXAMPLE.COM", "new", time.Now(), 2, etypeID.AES256_CTS_HMAC_SHA1_96))
	data, err := kt.Marshal()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mm2go.keytab"), data, 0o600))
	c2, _, err := load(t, file, env, t.TempDir())
	require.NoError(t, err)
	require.NotEqual(t, c1.Flow("a", "b").Fingerprint(), c2.Flow("a", "b").Fingerprint())
}
