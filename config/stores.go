package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/pavlo-v-chernykh/keystore-go/v4"
	"software.sslmate.com/src/go-pkcs12"
)

// Java key and trust stores, read as Kafka's DefaultSslEngineFactory reads
// them: JKS (the default type) with keystore-go, PKCS12 with go-pkcs12.

// errStorePassword reports a store password that does not open the store,
// errKeyPassword a key password that does not decrypt a key.
var (
	errStorePassword = errors.New("wrong store password")
	errKeyPassword   = errors.New("wrong key password")
)

// trustStoreCerts returns the trusted certificates of a JKS or PKCS12 trust
// store. Without a password the store is read without checking its
// integrity, as Java does (a JKS store; PKCS12 stores made by keytool are
// encrypted and need it).
func trustStoreCerts(typ string, data []byte, password string) ([]*x509.Certificate, error) {
	switch typ {
	case "JKS":
		ks, err := loadJKS(data, password, password == "")
		if err != nil {
			return nil, err
		}
		var out []*x509.Certificate
		for _, alias := range ks.Aliases() {
			var der []byte
			switch {
			case ks.IsTrustedCertificateEntry(alias):
				e, err := ks.GetTrustedCertificateEntry(alias)
				if err != nil {
					return nil, fmt.Errorf("entry %q: %w", alias, err)
				}
				der = e.Certificate.Content
			case ks.IsPrivateKeyEntry(alias):
				// Java trusts only certificate entries.
				continue
			}
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return nil, fmt.Errorf("entry %q: %w", alias, err)
			}
			out = append(out, c)
		}
		if len(out) == 0 {
			return nil, errors.New("no trusted certificate entry")
		}
		return out, nil
	case "PKCS12":
		certs, err := pkcs12.DecodeTrustStore(data, password)
		if errors.Is(err, pkcs12.ErrIncorrectPassword) {
			return nil, errStorePassword
		}
		if err != nil {
			return nil, err
		}
		if len(certs) == 0 {
			return nil, errors.New("no trusted certificate entry")
		}
		return certs, nil
	}
	return nil, fmt.Errorf("unsupported store type %q", typ)
}

// keyStoreCerts returns the client certificates of a JKS or PKCS12 key
// store: every private key entry with its certificate chain, the keys
// decrypted with keyPassword (Kafka: ssl.key.password, else the store's).
func keyStoreCerts(typ string, data []byte, storePassword, keyPassword string) ([]tls.Certificate, error) {
	switch typ {
	case "JKS":
		ks, err := loadJKS(data, storePassword, false)
		if err != nil {
			return nil, err
		}
		var out []tls.Certificate
		for _, alias := range ks.Aliases() {
			if !ks.IsPrivateKeyEntry(alias) {
				continue
			}
			e, err := ks.GetPrivateKeyEntry(alias, []byte(keyPassword))
			if err != nil {
				return nil, fmt.Errorf("key %q: %w", alias, errKeyPassword)
			}
			var chain []*x509.Certificate
			for _, c := range e.CertificateChain {
				cert, err := x509.ParseCertificate(c.Content)
				if err != nil {
					return nil, fmt.Errorf("key %q: certificate chain: %w", alias, err)
				}
				chain = append(chain, cert)
			}
			key, err := x509.ParsePKCS8PrivateKey(e.PrivateKey)
			if err != nil {
				return nil, fmt.Errorf("key %q: %w", alias, err)
			}
			cert, err := certificate(key, chain)
			if err != nil {
				return nil, fmt.Errorf("key %q: %w", alias, err)
			}
			out = append(out, cert)
		}
		if len(out) == 0 {
			return nil, errors.New("no private key entry")
		}
		return out, nil
	case "PKCS12":
		// The store's password opens it, as in Java; keytool gives a
		// PKCS12 key the same password.
		key, leaf, cas, err := pkcs12.DecodeChain(data, storePassword)
		if errors.Is(err, pkcs12.ErrIncorrectPassword) {
			return nil, errStorePassword
		}
		if err != nil {
			return nil, err
		}
		cert, err := certificate(key, append([]*x509.Certificate{leaf}, cas...))
		if err != nil {
			return nil, err
		}
		return []tls.Certificate{cert}, nil
	}
	return nil, fmt.Errorf("unsupported store type %q", typ)
}

// loadJKS reads a JKS store. With lenient, a digest that does not match
// (no password, or another one) is no error, as in Java when the store is
// loaded without a password: the entries are read before the digest.
func loadJKS(data []byte, password string, lenient bool) (keystore.KeyStore, error) {
	ks := keystore.New(keystore.WithOrderedAliases(), keystore.WithCaseExactAliases())
	err := ks.Load(bytes.NewReader(data), []byte(password))
	switch {
	case err == nil:
		return ks, nil
	case err.Error() == "got invalid digest" && lenient:
		return ks, nil
	case err.Error() == "got invalid digest":
		return ks, errStorePassword
	}
	return ks, fmt.Errorf("not a JKS store: %w", err)
}

// certificate pairs a private key with its chain, leaf first, checking that
// they belong together.
func certificate(key any, chain []*x509.Certificate) (tls.Certificate, error) {
	if len(chain) == 0 || chain[0] == nil {
		return tls.Certificate{}, errors.New("a private key without a certificate")
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("encode private key: %w", err)
	}
	var certPEM []byte
	for _, c := range chain {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("match key and certificate: %w", err)
	}
	return cert, nil
}
