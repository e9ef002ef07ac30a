package config

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDecryptPKCS8 decrypts keys written by OpenSSL 3 (openssl pkcs8 -topk8
// -v2 ...) with the schemes Java and OpenSSL use, and rejects PBES1.
func TestDecryptPKCS8(t *testing.T) {
	plainBlocks, err := pemEntries(mustRead(t, "testdata/pkcs8/plain.pem"))
	require.NoError(t, err)
	want := plainBlocks[0].der
	tests := []struct {
		file, password, err string
	}{
		{file: "aes256-sha256.pem", password: "test-password"},
		{file: "aes128-sha1.pem", password: "test-password"},
		{file: "des3-sha512.pem", password: "test-password"},
		{file: "aes256-sha256.pem", password: "wrong", err: "wrong password"},
		{file: "pbes1.pem", password: "test-password", err: "unsupported key encryption"},
	}
	for _, tt := range tests {
		t.Run(tt.file+"/"+tt.password, func(t *testing.T) {
			blocks, err := pemEntries(mustRead(t, filepath.Join("testdata/pkcs8", tt.file)))
			require.NoError(t, err)
			require.Equal(t, "ENCRYPTED PRIVATE KEY", blocks[0].label)
			got, err := decryptPKCS8(blocks[0].der, []byte(tt.password))
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

// TestPEMEntriesLenient parses PEM the way Kafka does: a value joined from
// continuation lines has no line breaks, and text around blocks is ignored.
func TestPEMEntriesLenient(t *testing.T) {
	p := newTestPKI(t, []string{"broker"}, nil)
	tests := []struct {
		name string
		in   string
		n    int
	}{
		{"standard", string(p.caPEM), 1},
		{"one line", "-----BEGIN CERTIFICATE----- " + strings.Join(strings.Fields(pemBody(p.caPEM)), "") + " -----END CERTIFICATE-----", 1},
		{"bag attributes and two certs", "Bag Attributes\n    localKeyID: 01\nsubject=/CN=x\n" + string(p.caPEM) + "junk\n" + string(p.serverCertPEM), 2},
		{"no newline at end", strings.TrimSpace(string(p.caPEM)), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certs, err := parseCertificates([]byte(tt.in))
			require.NoError(t, err)
			require.Len(t, certs, tt.n)
			require.Equal(t, "mm2go test CA", certs[0].Subject.CommonName)
		})
	}
	_, err := parseCertificates([]byte("no pem here"))
	require.ErrorContains(t, err, "no CERTIFICATE block found")
}

// pemBody returns the base64 body of the first PEM block.
func pemBody(data []byte) string {
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[1:len(lines)-1], "\n")
}

// tlsServer starts a TLS listener on 127.0.0.1 that requires a client
// certificate signed by the test CA. Each accepted connection completes the
// handshake and is closed.
func tlsServer(t *testing.T, p *testPKI) string {
	t.Helper()
	cert, err := tls.X509KeyPair(p.serverCertPEM, p.serverKeyPEM)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			_ = conn.(*tls.Conn).Handshake()
			_ = conn.Close()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// handshake dials addr with the client's TLS config the way kgo does (the
// server name is the host of the broker address).
func handshake(t *testing.T, c *Client, addr string) error {
	t.Helper()
	cfg := c.TLSConfig()
	require.NotNil(t, cfg)
	host, _, err := net.SplitHostPort(c.BootstrapServers[0])
	require.NoError(t, err)
	cfg.ServerName = host
	d := &tls.Dialer{Config: cfg, NetDialer: &net.Dialer{Timeout: 5 * time.Second}}
	conn, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		return err
	}
	// TLS 1.3 reports a rejected client certificate on the first read.
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	_ = conn.Close()
	if err != nil && strings.Contains(err.Error(), "EOF") {
		return nil
	}
	return err
}

// TestTLSHandshake proves the built TLS configs against a real TLS server:
// chain verification, hostname verification (and turning it off with an
// empty ssl.endpoint.identification.algorithm), client certificates from
// PEM files, encrypted keys and inline PEM values.
func TestTLSHandshake(t *testing.T) {
	p := newTestPKI(t, []string{"broker.example"}, nil)
	other := newTestPKI(t, []string{"broker.example"}, nil)
	addr := tlsServer(t, p)
	dir := t.TempDir()
	chain := append(append([]byte{}, p.clientCertPEM...), p.caPEM...)
	writeFiles(t, dir, map[string][]byte{
		"ca.pem":               p.caPEM,
		"other-ca.pem":         other.caPEM,
		"client.pem":           append(p.clientKeyPEM(t, ""), chain...),
		"client-encrypted.pem": append(p.clientKeyPEM(t, "key-pw"), chain...),
	})
	oneLine := func(b []byte) string { return strings.Join(strings.Fields(string(b)), " ") }
	base := "clusters = a, b\na.bootstrap.servers = localhost:9093\nb.bootstrap.servers = localhost:9092\na->b.enabled = true\n" +
		"a.security.protocol = SSL\na.ssl.truststore.type = PEM\na.ssl.keystore.type = PEM\n"
	tests := []struct {
		name  string
		extra string
		ok    bool
		err   string
	}{
		{"chain only", "a.ssl.truststore.location = ca.pem\na.ssl.keystore.location = client.pem\na.ssl.endpoint.identification.algorithm =\n", true, ""},
		{"hostname checked by default", "a.ssl.truststore.location = ca.pem\na.ssl.keystore.location = client.pem\n", false,
			"certificate is valid for broker.example, not localhost"},
		{"hostname matches", "a.ssl.truststore.location = ca.pem\na.ssl.keystore.location = client.pem\na.bootstrap.servers = broker.example:9093\n", true, ""},
		{"wrong CA", "a.ssl.truststore.location = other-ca.pem\na.ssl.keystore.location = client.pem\na.ssl.endpoint.identification.algorithm =\n", false,
			"verify server certificate"},
		{"no client certificate", "a.ssl.truststore.location = ca.pem\na.ssl.endpoint.identification.algorithm =\n", false,
			"certificate required"},
		{"encrypted key", "a.ssl.truststore.location = ca.pem\na.ssl.keystore.location = client-encrypted.pem\na.ssl.key.password = key-pw\n" +
			"a.ssl.endpoint.identification.algorithm =\n", true, ""},
		{"inline PEM on one line", "a.ssl.truststore.certificates = " + oneLine(p.caPEM) + "\n" +
			"a.ssl.keystore.key = " + oneLine(p.clientKeyPEM(t, "")) + "\n" +
			"a.ssl.keystore.certificate.chain = " + oneLine(p.clientCertPEM) + "\n" +
			"a.ssl.endpoint.identification.algorithm =\n", true, ""},
		{"TLS 1.2 only", "a.ssl.truststore.location = ca.pem\na.ssl.keystore.location = client.pem\na.ssl.endpoint.identification.algorithm =\n" +
			"a.ssl.protocol = TLSv1.2\n", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := load(t, base+tt.extra, nil, dir)
			require.NoError(t, err)
			cl := c.Flow("a", "b").Client(RoleSourceConsumer)
			err = handshake(t, cl, addr)
			if tt.ok {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tt.err)
			}
		})
	}
}

// TestTLSSettings covers the load-time checks of ssl.* keys.
func TestTLSSettings(t *testing.T) {
	p := newTestPKI(t, []string{"broker"}, nil)
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{
		"ca.pem":               p.caPEM,
		"client.pem":           append(p.clientKeyPEM(t, ""), p.clientCertPEM...),
		"client-encrypted.pem": append(p.clientKeyPEM(t, "key-pw"), p.clientCertPEM...),
		"mismatch.pem":         append(p.clientKeyPEM(t, ""), p.serverCertPEM...),
		"legacy.pem":           append(mustRead(t, "testdata/pkcs8/legacy.pem"), p.clientCertPEM...),
		"empty.pem":            []byte("nothing\n"),
	})
	base := twoClusters + "a.security.protocol = SSL\n"
	errTests := []struct {
		name, extra, want string
	}{
		{"encrypted key without password", "a.ssl.keystore.type = PEM\na.ssl.keystore.location = client-encrypted.pem\n",
			"a.ssl.keystore.location: the private key is encrypted (got an encrypted key, want ssl.key.password to be set)"},
		{"wrong key password", "a.ssl.keystore.type = PEM\na.ssl.keystore.location = client-encrypted.pem\na.ssl.key.password = nope\n",
			`a.ssl.key.password: cannot decrypt the private key: wrong password (got <secret>, want the password of the key in file "client-encrypted.pem")`},
		{"key does not match certificate", "a.ssl.keystore.type = PEM\na.ssl.keystore.location = mismatch.pem\n",
			"a.ssl.keystore.location: unusable key pair"},
		{"legacy encrypted key", "a.ssl.keystore.type = PEM\na.ssl.keystore.location = legacy.pem\n",
			"legacy OpenSSL-encrypted keys (Proc-Type header) are not supported"},
		{"no certificate in trust store", "a.ssl.truststore.type = PEM\na.ssl.truststore.location = empty.pem\n",
			"a.ssl.truststore.location: no usable certificate"},
		{"both trust store forms", "a.ssl.truststore.type = PEM\na.ssl.truststore.location = ca.pem\na.ssl.truststore.certificates = x\n",
			"a.ssl.truststore.certificates: both ssl.truststore.location and ssl.truststore.certificates are set"},
		{"key without chain", "a.ssl.keystore.type = PEM\na.ssl.keystore.key = x\n",
			"a.ssl.keystore.key: a private key without ssl.keystore.certificate.chain"},
		{"chain without key", "a.ssl.keystore.type = PEM\na.ssl.keystore.certificate.chain = x\n",
			"a.ssl.keystore.certificate.chain: a certificate chain without ssl.keystore.key"},
		{"missing file names key and path", "a.ssl.truststore.type = PEM\na.ssl.truststore.location = nope.pem\n",
			"a.ssl.truststore.location: cannot read file " + filepath.Join(dir, "nope.pem")},
		{"protocol below enabled", "a.ssl.enabled.protocols = TLSv1.3\na.ssl.protocol = TLSv1.2\n",
			"a.ssl.protocol: below every enabled protocol"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := load(t, base+tt.extra, nil, dir)
			require.ErrorContains(t, err, tt.want)
		})
	}

	c, _, err := load(t, base+`
a.ssl.enabled.protocols = TLSv1.2, TLSv1.3
a.ssl.protocol = TLSv1.2
a.ssl.cipher.suites = TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256
a.producer.ssl.enabled.protocols = TLSv1.3
a.producer.ssl.protocol = TLS
a.admin.ssl.truststore.type = pem
a.admin.ssl.truststore.location = ca.pem
`, nil, dir)
	require.NoError(t, err)
	f := c.Flow("a", "b")
	cons := f.Client(RoleSourceConsumer).TLSConfig()
	require.Equal(t, uint16(tls.VersionTLS12), cons.MinVersion)
	require.Equal(t, uint16(tls.VersionTLS12), cons.MaxVersion, "ssl.protocol caps the version")
	require.Equal(t, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_AES_128_GCM_SHA256}, cons.CipherSuites)
	require.Nil(t, cons.RootCAs, "no trust store: the system roots")
	require.False(t, cons.InsecureSkipVerify)
	prod := f.Client(RoleSourceProducer).TLSConfig()
	require.Equal(t, uint16(tls.VersionTLS13), prod.MinVersion)
	require.Equal(t, uint16(tls.VersionTLS13), prod.MaxVersion, "ssl.protocol TLS sets no cap")
	require.NotNil(t, f.Client(RoleSourceAdmin).TLSConfig().RootCAs)
	require.Nil(t, f.Client(RoleTargetAdmin).TLSConfig(), "cluster b is PLAINTEXT")
	tlsOpt := newKgo(t, f.Client(RoleSourceAdmin)).OptValue(kgo.DialTLSConfig)
	require.NotNil(t, tlsOpt)
}

// TestGoldenTLSAndSASL loads a SASL_SSL + mTLS configuration whose PEM
// files are generated by the test and compares the dump with
// testdata/tls-sasl.golden. Paths stay relative in the dump, so it is
// stable although the files are new on every run.
func TestGoldenTLSAndSASL(t *testing.T) {
	p := newTestPKI(t, []string{"broker"}, nil)
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{
		"ca.pem":             p.caPEM,
		"client.pem":         append(p.clientKeyPEM(t, "key-secret"), p.clientCertPEM...),
		"secrets.properties": []byte("keypass = key-secret\n"),
	})
	text, err := os.ReadFile(filepath.Join("testdata", "tls-sasl.properties.in"))
	require.NoError(t, err)
	c, ws, err := load(t, string(text), nil, dir)
	require.NoError(t, err)
	compareGolden(t, "tls-sasl", render(c, ws, nil))
	dst := c.Flow("src", "dst")
	require.Len(t, dst.Client(RoleTargetProducer).TLSConfig().Certificates, 1)
	require.True(t, dst.Client(RoleTargetProducer).TLSConfig().InsecureSkipVerify, "hostname check off, chain check on")
	require.Equal(t, SASLScramSHA512, dst.Client(RoleSourceConsumer).SASLMechanism)
	require.Empty(t, dst.Client(RoleTargetConsumer).SASLMechanism)
}

// TestKfakeSASLSSL connects a franz-go client built from Opts to an
// in-process Kafka (kfake) that requires TLS and SCRAM-SHA-512.
func TestKfakeSASLSSL(t *testing.T) {
	p := newTestPKI(t, nil, []net.IP{net.ParseIP("127.0.0.1")})
	cert, err := tls.X509KeyPair(p.serverCertPEM, p.serverKeyPEM)
	require.NoError(t, err)
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}}),
		kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", "mm2", "scram-pw"),
	)
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{"ca.pem": p.caPEM})

	for _, tt := range []struct {
		name, password string
		ok             bool
	}{{"right password", "scram-pw", true}, {"wrong password", "nope", false}} {
		t.Run(tt.name, func(t *testing.T) {
			text := "clusters = src, dst\n" +
				"src.bootstrap.servers = " + strings.Join(cluster.ListenAddrs(), ",") + "\n" +
				"dst.bootstrap.servers = " + strings.Join(cluster.ListenAddrs(), ",") + "\n" +
				"src->dst.enabled = true\n" +
				"security.protocol = SASL_SSL\n" +
				"ssl.truststore.type = PEM\n" +
				"ssl.truststore.location = ca.pem\n" +
				"sasl.mechanism = SCRAM-SHA-512\n" +
				`sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required username="mm2" password="` + tt.password + `";` + "\n"
			c, _, err := load(t, text, nil, dir)
			require.NoError(t, err)
			cl, err := kgo.NewClient(append(c.Flow("src", "dst").Client(RoleSourceAdmin).Opts(),
				kgo.RequestRetries(0), kgo.RetryTimeout(2*time.Second))...)
			require.NoError(t, err)
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = cl.Ping(ctx)
			if tt.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

// TestPEMKeyFormats accepts PKCS#1 and SEC1 keys too, which Go reads
// natively (Kafka itself wants PKCS#8).
func TestPEMKeyFormats(t *testing.T) {
	p := newTestPKI(t, []string{"broker"}, nil)
	key, err := x509.ParsePKCS8PrivateKey(p.clientKeyDER)
	require.NoError(t, err)
	sec1, err := x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
	require.NoError(t, err)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})
	cert, err := keyPair(keyPEM, p.clientCertPEM, nil)
	require.NoError(t, err)
	require.NotNil(t, cert.PrivateKey)
}
