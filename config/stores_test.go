package config

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// javaStores makes, with the JDK's keytool, what an MM2 user has: a JKS and a
// PKCS12 key store holding a client key signed by p's CA (the JKS key with a
// password of its own), and JKS and PKCS12 trust stores holding the CA.
func javaStores(t *testing.T, p *testPKI, dir string) {
	t.Helper()
	keytool, err := exec.LookPath("keytool")
	if err != nil {
		t.Skip("keytool (a JDK) is not on PATH")
	}
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(keytool, args...).CombinedOutput()
		require.NoError(t, err, "keytool %s: %s", strings.Join(args, " "), out)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ca.pem"), p.caPEM, 0o600))
	for _, s := range []struct{ file, typ, storePW, keyPW string }{
		{"client.jks", "JKS", "store-pw", "key-pw"},
		{"client.p12", "PKCS12", "p12-pw", "p12-pw"}, // keytool gives PKCS12 keys the store's password
	} {
		ks := filepath.Join(dir, s.file)
		common := []string{"-keystore", ks, "-storetype", s.typ, "-storepass", s.storePW}
		run(append([]string{"-genkeypair", "-alias", "client", "-keyalg", "EC", "-groupname", "secp256r1",
			"-dname", "CN=client", "-validity", "2", "-keypass", s.keyPW}, common...)...)
		csr := ks + ".csr"
		run(append([]string{"-certreq", "-alias", "client", "-keypass", s.keyPW, "-file", csr}, common...)...)
		signed := ks + ".crt"
		require.NoError(t, os.WriteFile(signed, append(signCSR(t, p, csr), p.caPEM...), 0o600))
		run(append([]string{"-importcert", "-alias", "ca", "-file", filepath.Join(dir, "ca.pem"), "-noprompt"}, common...)...)
		run(append([]string{"-importcert", "-alias", "client", "-keypass", s.keyPW, "-file", signed, "-noprompt"}, common...)...)
	}
	run("-importcert", "-alias", "ca", "-file", filepath.Join(dir, "ca.pem"), "-noprompt",
		"-keystore", filepath.Join(dir, "trust.jks"), "-storetype", "JKS", "-storepass", "trust-pw")
	run("-importcert", "-alias", "ca", "-file", filepath.Join(dir, "ca.pem"), "-noprompt",
		"-keystore", filepath.Join(dir, "trust.p12"), "-storetype", "PKCS12", "-storepass", "trust-pw")
}

// signCSR signs the PEM certificate request in file with p's CA and
// returns the certificate, PEM.
func signCSR(t *testing.T, p *testPKI, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	block, _ := pem.Decode(data)
	require.NotNil(t, block, "no PEM in %s", file)
	req, err := x509.ParseCertificateRequest(block.Bytes)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      req.Subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, req.PublicKey, p.caKey)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestTLSJavaStores: JKS and PKCS12 stores made by keytool open a TLS
// connection that requires a client certificate, as Kafka would read them;
// wrong passwords and stores without what they should hold are named.
func TestTLSJavaStores(t *testing.T) {
	p := newTestPKI(t, []string{"broker.example"}, nil)
	addr := tlsServer(t, p)
	dir := t.TempDir()
	javaStores(t, p, dir)
	base := "clusters = a, b\na.bootstrap.servers = localhost:9093\nb.bootstrap.servers = localhost:9092\na->b.enabled = true\n" +
		"a.security.protocol = SSL\na.ssl.endpoint.identification.algorithm =\n"
	jks := "a.ssl.keystore.location = client.jks\na.ssl.keystore.password = store-pw\na.ssl.key.password = key-pw\n"
	p12 := "a.ssl.keystore.type = PKCS12\na.ssl.keystore.location = client.p12\na.ssl.keystore.password = p12-pw\n"
	trustJKS := "a.ssl.truststore.location = trust.jks\na.ssl.truststore.password = trust-pw\n"
	trustP12 := "a.ssl.truststore.type = PKCS12\na.ssl.truststore.location = trust.p12\na.ssl.truststore.password = trust-pw\n"
	for _, tt := range []struct{ name, extra string }{
		{"JKS (the default type)", jks + trustJKS},
		{"PKCS12", p12 + trustP12},
		{"JKS trust store without its password", jks + "a.ssl.truststore.location = trust.jks\n"},
		{"mixed", p12 + trustJKS},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, ws, err := load(t, base+tt.extra, nil, dir)
			require.NoError(t, err)
			require.NoError(t, handshake(t, c.Flow("a", "b").Client(RoleSourceConsumer), addr))
			// The client certificates signCSR made expire in a day; the CA
			// in a year.
			var expiring []string
			for _, w := range ws {
				if strings.Contains(w.Message, "expires at") {
					expiring = append(expiring, w.Key+": "+w.Message)
				}
			}
			require.Len(t, expiring, 1)
			var kinds []string
			for _, c := range c.Flow("a", "b").Certificates() {
				kinds = append(kinds, c.Cluster+" "+c.Kind+" "+c.Subject)
			}
			require.Equal(t, []string{"a client CN=client", "a trusted CN=mm2go test CA"}, kinds)
			require.Contains(t, expiring[0], `a.ssl.keystore.location: the client certificate "CN=client" expires at`)
			require.Contains(t, expiring[0], "(got less than 14 days, want it renewed before then)")
		})
	}
	for _, tt := range []struct{ name, extra, want string }{
		{"wrong key store password", strings.Replace(jks, "= store-pw", "= nope", 1) + trustJKS,
			`a.ssl.keystore.password: wrong password for JKS key store file "client.jks" (got <secret>, want the store's password)`},
		{"wrong key password", strings.Replace(jks, "= key-pw", "= nope", 1) + trustJKS,
			`a.ssl.key.password: key "client": wrong key password (got <secret>, want the password of the key in file "client.jks")`},
		{"key password not given", strings.Replace(jks, "a.ssl.key.password = key-pw\n", "", 1) + trustJKS,
			`a.ssl.keystore.password: key "client": wrong key password (got <secret>, want the key's password in ssl.key.password`},
		{"wrong PKCS12 password", strings.Replace(p12, "= p12-pw", "= nope", 1) + trustP12,
			`a.ssl.keystore.password: wrong password for PKCS12 key store file "client.p12"`},
		{"wrong trust store password", jks + strings.Replace(trustP12, "= trust-pw", "= nope", 1),
			`a.ssl.truststore.password: wrong password for PKCS12 trust store file "trust.p12" (got <secret>, want the store's password)`},
		{"a trust store used as key store", "a.ssl.keystore.location = trust.jks\na.ssl.keystore.password = trust-pw\n" + trustJKS,
			`a.ssl.keystore.location: no usable key (got JKS key store file "trust.jks", want a private key entry with its certificate chain: no private key entry)`},
		{"a key store without its password", "a.ssl.keystore.location = client.jks\n" + trustJKS,
			"a.ssl.keystore.location: a JKS key store needs its password (got no ssl.keystore.password, want it)"},
		{"not a store", "a.ssl.truststore.location = ca.pem\n",
			`a.ssl.truststore.location: no usable certificate (got JKS trust store file "ca.pem", want trusted certificate entries: not a JKS store`},
		{"an unknown type", "a.ssl.truststore.type = BKS\na.ssl.truststore.location = trust.jks\n",
			`a.ssl.truststore.type: unsupported trust store type (got "BKS", want JKS, PKCS12 or PEM)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := load(t, base+tt.extra, nil, dir)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "store-pw")
			require.NotContains(t, err.Error(), "key-pw")
		})
	}
}
