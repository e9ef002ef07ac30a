package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/ktest"
)

// testCert is a CA (PEM) and a server certificate for 127.0.0.1 it signed.
type testCert struct {
	caPEM  []byte
	server tls.Certificate
}

func newTestCert(t *testing.T) testCert {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err = x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "broker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	return testCert{
		caPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		server: tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key},
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// parseFlow loads props and returns the flow A->B.
func parseFlow(t *testing.T, dir string, props ...string) *config.Flow {
	t.Helper()
	cfg, _, err := config.Parse([]byte(strings.Join(props, "\n")), dir)
	require.NoError(t, err)
	f := cfg.Flow("A", "B")
	require.NotNil(t, f)
	return f
}

// TestPreflight checks that each kind of connection failure is reported as
// a *clusterError naming the failing cluster, its bootstrap servers and the
// problem, and that no secret appears in the message.
func TestPreflight(t *testing.T) {
	cert := newTestCert(t)
	other := newTestCert(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ca.pem"), cert.caPEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other.pem"), other.caPEM, 0o600))

	plain := ktest.Fake(t, 1)
	sasl := ktest.Fake(t, 1, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "admin", "right-pw-1234"))
	secure := ktest.Fake(t, 1, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert.server}, MinVersion: tls.VersionTLS12}))
	plainAddr, saslAddr, tlsAddr := plain.ListenAddrs()[0], sasl.ListenAddrs()[0], secure.ListenAddrs()[0]
	down := closedAddr(t)
	scram := func(pw string) []string {
		return []string{"B.security.protocol = SASL_PLAINTEXT", "B.sasl.mechanism = SCRAM-SHA-512",
			`B.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="` + pw + `";`}
	}
	trust := func(file string) []string {
		return []string{"B.security.protocol = SSL", "B.ssl.truststore.type = PEM", "B.ssl.truststore.location = " + file}
	}

	for _, tc := range []struct {
		name    string
		target  string
		props   []string
		problem string // prefix of clusterError.Problem; "" means no error
	}{
		{name: "plaintext ok", target: plainAddr},
		{name: "SCRAM ok", target: saslAddr, props: scram("right-pw-1234")},
		{name: "TLS ok", target: tlsAddr, props: trust("ca.pem")},
		// kfake closes the connection on a wrong password where Kafka
		// answers SASL_AUTHENTICATION_FAILED (the e2e test covers that).
		{name: "wrong password", target: saslAddr, props: scram("wrong-pw-5678"), problem: "the broker closed the connection"},
		{name: "SASL missing", target: saslAddr, problem: "the broker closed the connection"},
		{name: "unknown CA", target: tlsAddr, props: trust("other.pem"), problem: "TLS: the broker's certificate is not signed by a trusted CA"},
		{name: "connection refused", target: down, problem: "unreachable: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			props := append([]string{
				"clusters = A, B",
				"A.bootstrap.servers = " + plainAddr,
				"B.bootstrap.servers = " + tc.target,
				"A->B.enabled = true",
			}, tc.props...)
			f := parseFlow(t, dir, props...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := preflight(ctx, f)
			if tc.problem == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			var ce *clusterError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, "B", ce.Cluster, "only the target fails")
			require.True(t, strings.HasPrefix(ce.Problem, tc.problem), "problem %q, want prefix %q", ce.Problem, tc.problem)
			require.True(t, strings.HasPrefix(err.Error(), "cluster B ("+tc.target+"): "+tc.problem), "%v", err)
			require.Empty(t, ce.Clients, "every client of B fails the same way")
			require.NotContains(t, err.Error(), "pw-")
		})
	}
}

// TestPreflightNamesClients checks that a failure of only some clients of a
// cluster (here the admin, whose own settings carry a wrong password) names
// those clients.
func TestPreflightNamesClients(t *testing.T) {
	sasl := ktest.Fake(t, 1, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "admin", "right-pw-1234"))
	addr := sasl.ListenAddrs()[0]
	jaas := func(pw string) string {
		return `org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="` + pw + `";`
	}
	f := parseFlow(t, t.TempDir(),
		"clusters = A, B",
		"bootstrap.servers = "+addr,
		"security.protocol = SASL_PLAINTEXT",
		"sasl.mechanism = SCRAM-SHA-512",
		"sasl.jaas.config = "+jaas("right-pw-1234"),
		"B.admin.sasl.jaas.config = "+jaas("wrong-pw-5678"),
		"A->B.enabled = true",
	)
	err := preflight(context.Background(), f)
	var ce *clusterError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "B", ce.Cluster)
	require.Equal(t, []string{config.RoleTargetAdmin.ClientRole()}, ce.Clients)
	require.Contains(t, err.Error(), "[only the replication-target-admin client settings]")
}

// TestCheckClientNoAnswer checks the deadline case: a listener that accepts
// connections but never answers is told apart from an unreachable host.
func TestCheckClientNoAnswer(t *testing.T) {
	silent, _ := silentListener(t)
	f := parseFlow(t, t.TempDir(), "clusters = A, B", "A.bootstrap.servers = "+silent,
		"B.bootstrap.servers = "+closedAddr(t), "A->B.enabled = true")
	err := checkClient(context.Background(), f.Client(config.RoleSourceAdmin), time.Second)
	var ce *clusterError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "A", ce.Cluster)
	require.True(t, strings.HasPrefix(ce.Problem, "connected, but no Kafka answer"), ce.Problem)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestFlowNotUpDuringPreflight: a flow whose connectivity check has not
// passed (here: a target that accepts connections and never answers) is
// neither up (mm2go_flow_up) nor ready (/readyz).
func TestFlowNotUpDuringPreflight(t *testing.T) {
	src := newCluster(t)
	silent, accepted := silentListener(t)
	cfg := testConfig(t, src, src, "B.bootstrap.servers = "+silent)
	reg := prometheus.NewRegistry()
	log, lvl, err := newLogger(io.Discard, "info", logJSON, reg)
	require.NoError(t, err)
	d, err := newDaemon(daemonOptions{Config: cfg, Log: log, Level: lvl, Registry: reg, ListenAddress: "127.0.0.1:0", DrainTimeout: time.Second})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	defer func() {
		d.Stop()
		require.NoError(t, <-done)
	}()
	base := "http://" + d.Addr()
	// The check of the target connected and waits for an answer (15 s
	// before it gives up); meanwhile:
	require.Eventually(t, func() bool { return accepted() > 0 }, 10*time.Second, 20*time.Millisecond, "the connectivity check reached the target")
	for range 10 {
		up, _ := seriesValue(t, base+"/metrics", "mm2go_flow_up", map[string]string{"flow": "A->B"})
		require.Zero(t, up, "mm2go_flow_up while the flow's connectivity check is pending")
		resp, err := http.Get(base + "/readyz")
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		time.Sleep(100 * time.Millisecond)
	}
}

// silentListener returns the address of a listener that accepts
// connections and never answers, and how many it accepted so far.
func silentListener(t *testing.T) (addr string, accepted func() int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	return ln.Addr().String(), n.Load
}
