package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestCertificateExpiry: the certificates a flow trusts are listed by
// validate with their expiry and exported as an expiry timestamp per flow,
// whose series end with the flow.
func TestCertificateExpiry(t *testing.T) {
	cert := newTestCert(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ca.pem"), cert.caPEM, 0o600))
	lines := []string{"clusters = A, B", "A.bootstrap.servers = 127.0.0.1:1", "B.bootstrap.servers = 127.0.0.1:2",
		"A->B.enabled = true", "A.security.protocol = SSL", "A.ssl.truststore.type = PEM", "A.ssl.truststore.location = ca.pem"}
	f := parseFlow(t, dir, lines...)
	certs := f.Certificates()
	require.Len(t, certs, 1)

	reg := prometheus.NewRegistry()
	m := newDaemonMetrics(reg)
	m.certificates(f)
	g := m.certExpiry.WithLabelValues("A->B", "A", "trusted", "CN=test CA")
	require.Equal(t, float64(certs[0].NotAfter.Unix()), testutil.ToFloat64(g))
	require.Equal(t, 1, testutil.CollectAndCount(m.certExpiry))
	m.forgetFlow("A->B")
	require.Zero(t, testutil.CollectAndCount(m.certExpiry), "a removed flow's certificate series end")

	file := filepath.Join(dir, "mm2.properties")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, runValidate([]string{"-c", file}, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), "certificates of flow A->B\n  A trusted \"CN=test CA\" expires ")
	require.Contains(t, stdout.String(), " from A.ssl.truststore.location\n")
	// The test CA lives an hour: loading warns.
	require.Contains(t, stderr.String(), `the trusted certificate \"CN=test CA\" expires at`)
}
