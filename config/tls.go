package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// tlsConfig builds the TLS configuration from the ssl.* properties the way
// Kafka's DefaultSslEngineFactory reads them: JKS (the default), PKCS12 and
// PEM stores. It returns the digests of the files it read, for
// Flow.Fingerprint.
func (b *clientBuilder) tlsConfig() (*tls.Config, []string, bool) {
	ok := true
	fail := func(key, format string, args ...any) {
		b.p.probs.errorf(key, format, args...)
		ok = false
	}
	get := b.setProp
	var material []string
	readFile := func(e entry) ([]byte, bool) {
		path := b.p.abs(javaTrim(e.value))
		data, err := b.p.readFile(path)
		if err != nil {
			fail(e.origin, "cannot read file %s (got %q, want a readable file: %v)", path, e.value, errors.Unwrap(err))
			return nil, false
		}
		material = append(material, e.origin+"="+fileDigest(data))
		return data, true
	}

	cfg := &tls.Config{MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS13}
	b.tlsVersions(cfg, fail)

	if e, found := get("ssl.cipher.suites"); found {
		ids := map[string]uint16{}
		for _, cs := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
			ids[cs.Name] = cs.ID
		}
		for _, name := range parseList(e.value) {
			id, known := ids[name]
			if !known {
				fail(e.origin, "unknown cipher suite %q (got %q, want IANA names such as TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)", name, e.value)
				continue
			}
			cfg.CipherSuites = append(cfg.CipherSuites, id)
		}
	}

	// Trust store.
	ttype, ttypeE := storeType(b.props, "ssl.truststore.type")
	tloc, hasTLoc := get("ssl.truststore.location")
	tcerts, hasTCerts := get("ssl.truststore.certificates")
	tpw, hasTPw := get("ssl.truststore.password")
	var pemTrust []byte
	var trustFrom entry
	var trusted []*x509.Certificate
	switch {
	case hasTCerts:
		switch {
		case ttype != "PEM":
			fail(tcerts.origin, "trusted certificates are read only as PEM (got ssl.truststore.type %q, want PEM)", ttype)
		case hasTLoc:
			fail(tcerts.origin, "both ssl.truststore.location and ssl.truststore.certificates are set (got both, want one)")
		default:
			pemTrust, trustFrom = []byte(tcerts.value), tcerts
		}
	case hasTLoc:
		switch ttype {
		case "PEM":
			if data, read := readFile(tloc); read {
				pemTrust, trustFrom = data, tloc
			}
		case "JKS", "PKCS12":
			data, read := readFile(tloc)
			if !read {
				break
			}
			certs, err := trustStoreCerts(ttype, data, tpw.value)
			switch {
			case errors.Is(err, errStorePassword):
				fail(originOr(tpw, tloc), "wrong password for %s trust store %s (got %s, want the store's password)", ttype, describeStore(tloc), maskedOrNone(hasTPw))
			case err != nil:
				fail(tloc.origin, "no usable certificate (got %s trust store %s, want trusted certificate entries: %v)", ttype, describeStore(tloc), err)
			default:
				cfg.RootCAs = x509.NewCertPool()
				for _, c := range certs {
					cfg.RootCAs.AddCert(c)
				}
				trusted = certs
			}
		default:
			fail(originOr(ttypeE, tloc), "unsupported trust store type (got %q, want JKS, PKCS12 or PEM)", ttype)
		}
	case hasTPw:
		fail(tpw.origin, "a trust store password without a trust store (got %s, want no password or also ssl.truststore.location)", secretMask)
	}
	if ttype == "PEM" && hasTPw && (hasTLoc || hasTCerts) {
		fail(tpw.origin, "a password cannot be used with a PEM trust store (got %s, want no ssl.truststore.password), as in Kafka", secretMask)
	}
	if pemTrust != nil {
		pool := x509.NewCertPool()
		certs, err := parseCertificates(pemTrust)
		if err != nil {
			fail(trustFrom.origin, "no usable certificate (got %s, want PEM certificates: %v)", describeStore(trustFrom), err)
		}
		for _, c := range certs {
			pool.AddCert(c)
		}
		cfg.RootCAs, trusted = pool, certs
	}

	// Key store.
	ktype, ktypeE := storeType(b.props, "ssl.keystore.type")
	kloc, hasKLoc := get("ssl.keystore.location")
	kkey, hasKKey := get("ssl.keystore.key")
	kchain, hasKChain := get("ssl.keystore.certificate.chain")
	kpw, hasKPw := get("ssl.keystore.password")
	keyPw, hasKeyPw := get("ssl.key.password")
	var keyPEM, chainPEM []byte
	var keyFrom, chainFrom entry
	switch {
	case hasKKey:
		switch {
		case ktype != "PEM":
			fail(kkey.origin, "a private key is read only as PEM (got ssl.keystore.type %q, want PEM)", ktype)
		case !hasKChain:
			fail(kkey.origin, "a private key without ssl.keystore.certificate.chain (got only the key, want both)")
		case hasKLoc:
			fail(kkey.origin, "both ssl.keystore.location and ssl.keystore.key are set (got both, want one)")
		case hasKPw:
			fail(kpw.origin, "a key store password cannot be used with PEM (got %s, want only ssl.key.password), as in Kafka", secretMask)
		default:
			keyPEM, keyFrom, chainPEM, chainFrom = []byte(kkey.value), kkey, []byte(kchain.value), kchain
		}
	case hasKChain:
		fail(kchain.origin, "a certificate chain without ssl.keystore.key (got only the chain, want both)")
	case hasKLoc && (ktype == "JKS" || ktype == "PKCS12"):
		if !hasKPw {
			fail(kloc.origin, "a %s key store needs its password (got no ssl.keystore.password, want it)", ktype)
			break
		}
		data, read := readFile(kloc)
		if !read {
			break
		}
		keyPass := kpw.value
		if hasKeyPw {
			keyPass = keyPw.value
		}
		certs, err := keyStoreCerts(ktype, data, kpw.value, keyPass)
		switch {
		case errors.Is(err, errStorePassword):
			fail(kpw.origin, "wrong password for %s key store %s (got %s, want the store's password)", ktype, describeStore(kloc), secretMask)
		case errors.Is(err, errKeyPassword) && hasKeyPw:
			fail(keyPw.origin, "%v (got %s, want the password of the key in %s)", err, secretMask, describeStore(kloc))
		case errors.Is(err, errKeyPassword):
			fail(kpw.origin, "%v (got %s, want the key's password in ssl.key.password, or the same for store and key)", err, secretMask)
		case err != nil:
			fail(kloc.origin, "no usable key (got %s key store %s, want a private key entry with its certificate chain: %v)", ktype, describeStore(kloc), err)
		default:
			cfg.Certificates = certs
		}
	case hasKLoc:
		switch {
		case ktype != "PEM":
			fail(originOr(ktypeE, kloc), "unsupported key store type (got %q, want JKS, PKCS12 or PEM)", ktype)
		case hasKPw:
			fail(kpw.origin, "a key store password cannot be used with PEM (got %s, want only ssl.key.password), as in Kafka", secretMask)
		default:
			if data, read := readFile(kloc); read {
				keyPEM, keyFrom, chainPEM, chainFrom = data, kloc, data, kloc
			}
		}
	case hasKPw:
		fail(kpw.origin, "a key store password without a key store (got %s, want no password or also ssl.keystore.location)", secretMask)
	}
	if keyPEM != nil {
		var password *entry
		if hasKeyPw {
			password = &keyPw
		}
		cert, err := keyPair(keyPEM, chainPEM, password)
		var pwErr passwordError
		switch {
		case errors.As(err, &pwErr) && hasKeyPw:
			fail(keyPw.origin, "%v (got %s, want the password of the key in %s)", err, secretMask, describeStore(keyFrom))
		case errors.As(err, &pwErr):
			fail(keyFrom.origin, "%v (got an encrypted key, want ssl.key.password to be set)", err)
		case err != nil:
			fail(chainFrom.origin, "unusable key pair (got %s, want a PKCS#8 private key and its certificate chain: %v)", describeStore(keyFrom), err)
		default:
			cfg.Certificates = []tls.Certificate{cert}
		}
	}

	for _, c := range cfg.Certificates {
		if c.Leaf != nil {
			b.expiring(originOr(kloc, kkey), "client certificate", c.Leaf)
			b.c.certs = append(b.c.certs, Certificate{Cluster: b.c.Cluster, Kind: "client",
				Subject: c.Leaf.Subject.String(), NotAfter: c.Leaf.NotAfter, Key: originOr(kloc, kkey)})
		}
	}
	if cfg.RootCAs != nil {
		for _, c := range trusted {
			b.expiring(originOr(tloc, tcerts), "trusted certificate", c)
			b.c.certs = append(b.c.certs, Certificate{Cluster: b.c.Cluster, Kind: "trusted",
				Subject: c.Subject.String(), NotAfter: c.NotAfter, Key: originOr(tloc, tcerts)})
		}
	}

	// Hostname verification.
	alg := "https"
	algE, hasAlg := b.props["ssl.endpoint.identification.algorithm"]
	if hasAlg {
		alg = javaTrim(algE.value)
	}
	switch strings.ToLower(alg) {
	case "https":
	case "":
		// Keep verifying the chain, but not the host name, like Java with
		// an empty endpoint identification algorithm.
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("verify server certificate: no certificate presented")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			if err != nil {
				return fmt.Errorf("verify server certificate: %w", err)
			}
			return nil
		}
	default:
		fail(algE.origin, "unsupported endpoint identification algorithm (got %q, want https or empty)", alg)
	}
	return cfg, material, ok
}

// tlsVersions applies ssl.enabled.protocols (lowest and highest enabled
// version, default TLSv1.2,TLSv1.3) and ssl.protocol (caps the highest
// version, default TLSv1.3; "TLS" means no cap).
func (b *clientBuilder) tlsVersions(cfg *tls.Config, fail func(string, string, ...any)) {
	if e, ok := b.props["ssl.enabled.protocols"]; ok {
		var lo, hi uint16
		for _, name := range parseList(e.value) {
			v, known := tlsVersion(name)
			if !known || v == 0 {
				fail(e.origin, "unsupported protocol %q (got %q, want TLSv1.2 and/or TLSv1.3; TLSv1 and TLSv1.1 also work)", name, e.value)
				continue
			}
			if lo == 0 || v < lo {
				lo = v
			}
			hi = max(hi, v)
		}
		if lo != 0 {
			cfg.MinVersion, cfg.MaxVersion = lo, hi
		}
	}
	if e, ok := b.props["ssl.protocol"]; ok {
		v, known := tlsVersion(e.value)
		switch {
		case !known:
			fail(e.origin, "unsupported protocol (got %q, want TLSv1.3, TLSv1.2 or TLS)", e.value)
		case v != 0 && v < cfg.MinVersion:
			fail(e.origin, "below every enabled protocol (got %q, want a version listed in ssl.enabled.protocols)", e.value)
		case v != 0:
			cfg.MaxVersion = min(cfg.MaxVersion, v)
		}
	}
}

// tlsVersion maps Java protocol names; "TLS" maps to 0 (no constraint).
func tlsVersion(name string) (uint16, bool) {
	switch strings.ToUpper(javaTrim(name)) {
	case "TLSV1.3":
		return tls.VersionTLS13, true
	case "TLSV1.2":
		return tls.VersionTLS12, true
	case "TLSV1.1":
		return tls.VersionTLS11, true
	case "TLSV1":
		return tls.VersionTLS10, true
	case "TLS":
		return 0, true
	}
	return 0, false
}

// storeType returns the upper-cased store type (default JKS, Kafka's
// default) and its entry.
func storeType(props entries, key string) (string, entry) {
	e, ok := props[key]
	if !ok || javaTrim(e.value) == "" {
		return "JKS", entry{}
	}
	return strings.ToUpper(javaTrim(e.value)), e
}

// expiryWarning is how long before a certificate expires loading it warns.
const expiryWarning = 14 * 24 * time.Hour

// expiring warns when c, read from the file or value of key, has expired or
// expires within expiryWarning.
func (b *clientBuilder) expiring(key, what string, c *x509.Certificate) {
	left := time.Until(c.NotAfter)
	switch {
	case left <= 0:
		b.p.probs.warn(key, "the %s %q expired at %s (got an expired certificate, want a valid one: the handshake will fail)",
			what, c.Subject.String(), c.NotAfter.UTC().Format(time.RFC3339))
	case left < expiryWarning:
		b.p.probs.warn(key, "the %s %q expires at %s, in %s (got less than %d days, want it renewed before then)",
			what, c.Subject.String(), c.NotAfter.UTC().Format(time.RFC3339), left.Round(time.Hour), int(expiryWarning.Hours()/24))
	}
}

// maskedOrNone describes a password that may be unset without printing it.
func maskedOrNone(set bool) string {
	if set {
		return secretMask
	}
	return "no password"
}

// originOr returns the origin of e, or of fallback when e is not set.
func originOr(e, fallback entry) string {
	if e.origin != "" {
		return e.origin
	}
	return fallback.origin
}

// describeStore names where PEM data came from without printing secrets.
func describeStore(e entry) string {
	if strings.HasSuffix(e.origin, "location") {
		return fmt.Sprintf("file %q", e.value)
	}
	return "the inline value of " + e.origin
}

// pemEntry is one PEM block found by the lenient parser.
type pemEntry struct {
	label   string // e.g. "CERTIFICATE", "ENCRYPTED PRIVATE KEY"
	headers bool   // encapsulated headers such as Proc-Type were present
	der     []byte
}

// pemEntries finds PEM blocks the way Kafka's PemParser does: headers and
// line breaks may be missing (a value joined from continuation lines in a
// properties file is one line), and text between blocks is ignored.
func pemEntries(data []byte) ([]pemEntry, error) {
	re := regexp.MustCompile(`-+BEGIN\s*([A-Z0-9 ]*?)\s*-+\s+((?:[^\r\n:]*:[^\r\n]*[\r\n]+)*)([A-Za-z0-9/+=\s]*?)-+END\s*([A-Z0-9 ]*?)\s*-+`)
	var out []pemEntry
	for _, m := range re.FindAllSubmatch(data, -1) {
		label := strings.Join(strings.Fields(string(m[1])), " ")
		b64 := strings.Join(strings.Fields(string(m[3])), "")
		der, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("decode PEM block %q: %w", label, err)
		}
		out = append(out, pemEntry{label: label, headers: len(m[2]) > 0, der: der})
	}
	return out, nil
}

// parseCertificates returns every CERTIFICATE block of data.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	blocks, err := pemEntries(data)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for _, b := range blocks {
		if b.label != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.der)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no CERTIFICATE block found")
	}
	return certs, nil
}

// passwordError reports a missing or wrong ssl.key.password.
type passwordError struct{ msg string }

func (e passwordError) Error() string { return e.msg }

// keyPair builds the client certificate from one private key block (PKCS#8,
// encrypted PKCS#8, PKCS#1 or SEC1) and the certificate chain, leaf first.
func keyPair(keyPEM, chainPEM []byte, password *entry) (tls.Certificate, error) {
	blocks, err := pemEntries(keyPEM)
	if err != nil {
		return tls.Certificate{}, err
	}
	var keys []pemEntry
	for _, b := range blocks {
		if strings.HasSuffix(b.label, "PRIVATE KEY") {
			keys = append(keys, b)
		}
	}
	if len(keys) != 1 {
		return tls.Certificate{}, fmt.Errorf("want exactly one private key, found %d", len(keys))
	}
	k := keys[0]
	if k.headers {
		return tls.Certificate{}, errors.New("legacy OpenSSL-encrypted keys (Proc-Type header) are not supported; convert with openssl pkcs8 -topk8")
	}
	var key any
	switch k.label {
	case "ENCRYPTED PRIVATE KEY":
		if password == nil {
			return tls.Certificate{}, passwordError{"the private key is encrypted"}
		}
		der, err := decryptPKCS8(k.der, []byte(password.value))
		if err != nil {
			return tls.Certificate{}, err
		}
		key, err = x509.ParsePKCS8PrivateKey(der)
		if err != nil {
			return tls.Certificate{}, passwordError{"cannot decrypt the private key: wrong password"}
		}
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(k.der)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(k.der)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(k.der)
	default:
		err = fmt.Errorf("unsupported key block %q", k.label)
	}
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parse private key: %w", err)
	}
	certs, err := parseCertificates(chainPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parse certificate chain: %w", err)
	}
	return certificate(key, certs)
}

// setProp returns the entry of k and whether it is set to something other
// than blanks (Kafka treats a blank value as unset).
func (b *clientBuilder) setProp(k string) (entry, bool) {
	e, found := b.props[k]
	if found && javaTrim(e.value) == "" {
		return e, false
	}
	return e, found
}
