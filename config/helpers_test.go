package config

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// load parses a properties text with a fake environment and base directory.
func load(t *testing.T, text string, env map[string]string, baseDir string) (*Config, []Warning, error) {
	t.Helper()
	return parse([]byte(text), baseDir, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
}

// mustLoad loads text and fails the test on error.
func mustLoad(t *testing.T, text string) (*Config, []Warning) {
	t.Helper()
	c, ws, err := load(t, text, nil, t.TempDir())
	require.NoError(t, err)
	return c, ws
}

// loadErr loads text, requires an error and returns its text.
func loadErr(t *testing.T, text string) string {
	t.Helper()
	c, _, err := load(t, text, nil, t.TempDir())
	require.Error(t, err)
	require.Nil(t, c)
	return err.Error()
}

// warningStrings renders warnings as "level key: message".
func warningStrings(ws []Warning) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Level.String()+" "+w.String())
	}
	return out
}

// hasWarning reports whether a warning for key contains substr.
func hasWarning(ws []Warning, key, substr string) bool {
	for _, w := range ws {
		if w.Key == key && strings.Contains(w.Message, substr) {
			return true
		}
	}
	return false
}

// twoClusters is a minimal valid file with one enabled flow a->b.
const twoClusters = `
clusters = a, b
a.bootstrap.servers = a1:9092
b.bootstrap.servers = b1:9092
a->b.enabled = true
`

// testPKI is a throw-away CA with a server and a client certificate.
type testPKI struct {
	caPEM         []byte
	ca            *x509.Certificate
	caKey         *ecdsa.PrivateKey
	serverCertPEM []byte
	serverKeyPEM  []byte
	clientCertPEM []byte
	clientKeyDER  []byte // PKCS#8
}

// newTestPKI creates a CA, a server certificate for the given host names
// and IPs, and a client certificate.
func newTestPKI(t *testing.T, serverNames []string, serverIPs []net.IP) *testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mm2go test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	p := &testPKI{ca: ca, caKey: caKey, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}

	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, names []string, ips []net.IP) ([]byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(365 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     names,
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		require.NoError(t, err)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyDER
	}
	var serverKeyDER []byte
	p.serverCertPEM, serverKeyDER = issue(2, "broker", x509.ExtKeyUsageServerAuth, serverNames, serverIPs)
	p.serverKeyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: serverKeyDER})
	p.clientCertPEM, p.clientKeyDER = issue(3, "mm2go", x509.ExtKeyUsageClientAuth, nil, nil)
	return p
}

// clientKeyPEM returns the client key as PKCS#8 PEM, encrypted with
// PBES2/PBKDF2-SHA256/AES-256-CBC when password is not empty (what
// openssl pkcs8 -topk8 -v2 aes-256-cbc -v2prf hmacWithSHA256 writes).
func (p *testPKI) clientKeyPEM(t *testing.T, password string) []byte {
	t.Helper()
	if password == "" {
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p.clientKeyDER})
	}
	return pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: encryptPKCS8(t, p.clientKeyDER, password)})
}

// encryptPKCS8 is the inverse of decryptPKCS8 for PBES2 with
// PBKDF2-HMAC-SHA256 and AES-256-CBC.
func encryptPKCS8(t *testing.T, der []byte, password string) []byte {
	t.Helper()
	salt := make([]byte, 16)
	iv := make([]byte, aes.BlockSize)
	_, err := rand.Read(salt)
	require.NoError(t, err)
	_, err = rand.Read(iv)
	require.NoError(t, err)
	const iter = 2048
	key, err := pbkdf2.Key(sha256.New, password, salt, iter, 32)
	require.NoError(t, err)
	block, err := aes.NewCipher(key)
	require.NoError(t, err)
	pad := aes.BlockSize - len(der)%aes.BlockSize
	plain := append(append([]byte{}, der...), []byte(strings.Repeat(string(rune(pad)), pad))...)
	enc := make([]byte, len(plain))
	cipher.NewCBCEncrypter(block, iv).CryptBlocks(enc, plain)

	mustMarshal := func(v any) []byte {
		b, err := asn1.Marshal(v)
		require.NoError(t, err)
		return b
	}
	kdfParams := mustMarshal(pbkdf2Params{Salt: salt, Iterations: iter,
		PRF: pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 9}, Parameters: asn1.NullRawValue}})
	ivBytes := mustMarshal(iv)
	pbes2 := mustMarshal(pbes2Params{
		KeyDerivationFunc: pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 12},
			Parameters: asn1.RawValue{FullBytes: kdfParams}},
		EncryptionScheme: pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 42},
			Parameters: asn1.RawValue{FullBytes: ivBytes}},
	})
	return mustMarshal(encryptedPrivateKeyInfo{
		Algorithm: pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 13},
			Parameters: asn1.RawValue{FullBytes: pbes2}},
		Data: enc,
	})
}

// writeFiles writes name -> content into dir.
func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, data, 0o600))
	}
}
