package config

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/jcmturner/gokrb5/v8/client"
	krbconfig "github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/kerberos"
)

// SASL/GSSAPI (Kerberos) as Kafka's Java clients do it with the JDK's
// Krb5LoginModule: a keytab (useKeyTab=true keyTab=... principal=...) or a
// ticket cache (useTicketCache=true [ticketCache=...]), the broker's service
// principal <sasl.kerberos.service.name>/<broker host>, and krb5.conf from
// KRB5_CONFIG, from -Djava.security.krb5.conf in KAFKA_OPTS (where MM2's
// users put it), or /etc/krb5.conf. gokrb5 does the Kerberos exchanges
// (franz-go's pkg/sasl/kerberos); each connection logs in afresh, so a
// ticket never outlives its keytab and nothing runs between connections.

// krb5LoginModule is the JDK's Kerberos login module.
const krb5LoginModule = "com.sun.security.auth.module.Krb5LoginModule"

// krb5Options are Krb5LoginModule's options: true for those mm2go reads,
// false for those that have no meaning here (they are accepted silently:
// the JDK's defaults or how it prompts and caches).
var krb5Options = map[string]bool{
	"useKeyTab": true, "keyTab": true, "principal": true, "useTicketCache": true, "ticketCache": true,
	"serviceName": true,
	"storeKey":    false, "doNotPrompt": false, "isInitiator": false, "renewTGT": false, "refreshKrb5Config": false,
	"debug": false, "tryFirstPass": false, "useFirstPass": false, "storePass": false, "clearPass": false,
}

// gssapiMechanism builds GSSAPI from the JAAS options; key is the
// sasl.jaas.config key, for errors.
func (b *clientBuilder) gssapiMechanism(key string, options map[string]string) (sasl.Mechanism, bool) {
	ok := true
	fail := func(k, format string, args ...any) {
		b.p.probs.errorf(k, format, args...)
		ok = false
	}
	for k := range options {
		if _, known := krb5Options[k]; !known {
			fail(key, "unknown Krb5LoginModule option %s (want useKeyTab, keyTab, principal, useTicketCache, ticketCache)", k)
		}
	}
	service := options["serviceName"]
	if e, found := b.setProp("sasl.kerberos.service.name"); found {
		service = javaTrim(e.value)
	}
	if service == "" {
		fail(b.c.Cluster+".sasl.kerberos.service.name", "missing for SASL mechanism GSSAPI (got nothing, want the brokers' Kerberos service name, usually kafka)")
	}
	krbPath, from := b.krb5ConfPath()
	data, err := b.p.readFile(krbPath)
	if err != nil {
		fail(key, "read krb5.conf %s (%s): %v", krbPath, from, err)
		return nil, false
	}
	cfg, err := krbconfig.NewFromString(string(data))
	if err != nil {
		fail(key, "krb5.conf %s (%s): %v", krbPath, from, err)
		return nil, false
	}
	b.c.material = append(b.c.material, "krb5.conf="+fileDigest(data))

	var newClient func() (*client.Client, error)
	switch {
	case strings.EqualFold(options["useKeyTab"], "true"):
		path := options["keyTab"]
		principal := options["principal"]
		if path == "" || principal == "" {
			fail(key, "useKeyTab=true needs keyTab and principal (got %s, want %s required useKeyTab=true keyTab=\"/etc/mm2go/mm2go.keytab\" principal=\"mm2go@EXAMPLE.COM\";)", secretMask, krb5LoginModule)
			return nil, false
		}
		kdata, err := b.p.readFile(b.p.abs(path))
		if err != nil {
			fail(key, "read keytab %s: %v", path, err)
			return nil, false
		}
		kt := keytab.New()
		if err := kt.Unmarshal(kdata); err != nil {
			fail(key, "keytab %s: %v", path, err)
			return nil, false
		}
		b.c.material = append(b.c.material, "keytab="+fileDigest(kdata))
		user, realm := splitPrincipal(principal, cfg.LibDefaults.DefaultRealm)
		if realm == "" {
			fail(key, "principal %q has no realm and krb5.conf %s names no default_realm", principal, krbPath)
			return nil, false
		}
		if !keytabHas(kt, user, realm) {
			fail(key, "keytab %s holds no key of %s@%s", path, user, realm)
			return nil, false
		}
		newClient = func() (*client.Client, error) {
			return client.NewWithKeytab(user, realm, kt, cfg, client.DisablePAFXFAST(true)), nil
		}
	case strings.EqualFold(options["useTicketCache"], "true"):
		path := options["ticketCache"]
		if path == "" {
			path = ticketCachePath(b.p.lookupEnv)
		}
		newClient = func() (*client.Client, error) {
			cc, err := credentials.LoadCCache(path)
			if err != nil {
				return nil, fmt.Errorf("read the Kerberos ticket cache %s: %w", path, err)
			}
			return client.NewFromCCache(cc, cfg, client.DisablePAFXFAST(true))
		}
	default:
		fail(key, "no Kerberos credentials (got neither useKeyTab=true nor useTicketCache=true, want a keytab: %s required useKeyTab=true keyTab=\"...\" principal=\"...\"; mm2go cannot prompt for a password)", krb5LoginModule)
		return nil, false
	}
	if !ok {
		return nil, false
	}
	return kerberos.Kerberos(func(context.Context) (kerberos.Auth, error) {
		cl, err := newClient()
		if err != nil {
			return kerberos.Auth{}, err
		}
		// ClientFn: a client per connection, destroyed once the
		// connection authenticated.
		return kerberos.Auth{Service: service, ClientFn: func(context.Context) *client.Client { return cl }}, nil
	}), true
}

// krb5ConfPath returns the krb5.conf to read and where its path came from.
func (b *clientBuilder) krb5ConfPath() (path, from string) {
	if v, ok := b.p.lookupEnv("KRB5_CONFIG"); ok && v != "" {
		return v, "KRB5_CONFIG"
	}
	for _, env := range []string{"KAFKA_OPTS", "KAFKA_HEAP_OPTS", "JAVA_TOOL_OPTIONS"} {
		v, _ := b.p.lookupEnv(env)
		for _, f := range strings.Fields(v) {
			if p, found := strings.CutPrefix(f, "-Djava.security.krb5.conf="); found && p != "" {
				return p, env + " -Djava.security.krb5.conf"
			}
		}
	}
	return "/etc/krb5.conf", "the default"
}

// ticketCachePath is the default ticket cache: KRB5CCNAME (FILE: caches
// only), else /tmp/krb5cc_<uid>.
func ticketCachePath(lookupEnv func(string) (string, bool)) string {
	if v, ok := lookupEnv("KRB5CCNAME"); ok && v != "" {
		return strings.TrimPrefix(v, "FILE:")
	}
	return fmt.Sprintf("/tmp/krb5cc_%d", os.Getuid())
}

// splitPrincipal splits user@REALM; a principal without a realm is in def.
func splitPrincipal(p, def string) (user, realm string) {
	if i := strings.LastIndexByte(p, '@'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return p, def
}

// keytabHas reports whether kt holds a key of user@realm.
func keytabHas(kt *keytab.Keytab, user, realm string) bool {
	for _, e := range kt.Entries {
		if e.Principal.Realm == realm && strings.Join(e.Principal.Components, "/") == user {
			return true
		}
	}
	return false
}
