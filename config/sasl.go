package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// JAAS login modules of the supported mechanisms.
const (
	plainLoginModule = "org.apache.kafka.common.security.plain.PlainLoginModule"
	scramLoginModule = "org.apache.kafka.common.security.scram.ScramLoginModule"
)

// jaasExample shows the expected shape of sasl.jaas.config.
const jaasExample = `<LoginModule> required username="..." password="...";`

// saslMechanism builds the SASL mechanism from sasl.mechanism (Kafka's
// default is GSSAPI) and the credentials in sasl.jaas.config.
func (b *clientBuilder) saslMechanism() (sasl.Mechanism, SASLMechanism, bool) {
	mechE, hasMech := b.props["sasl.mechanism"]
	mech := "GSSAPI"
	if hasMech {
		mech = javaTrim(mechE.value)
	}
	mechKey := mechE.origin
	if !hasMech {
		mechKey = b.c.Cluster + ".sasl.mechanism"
	}
	var module string
	switch SASLMechanism(mech) {
	case SASLPlain:
		module = plainLoginModule
	case SASLScramSHA256, SASLScramSHA512:
		module = scramLoginModule
	case SASLOAuthBearer:
		module = oauthLoginModule
	case SASLAWSMSKIAM:
		module = iamLoginModule
	case SASLGSSAPI:
		module = krb5LoginModule
	default:
		b.p.probs.errorf(mechKey, "unknown SASL mechanism (got %q, want GSSAPI, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM)", mech)
		return nil, "", false
	}

	jaasE, ok := b.props["sasl.jaas.config"]
	if !ok || javaTrim(jaasE.value) == "" {
		want := jaasExample + " with " + module
		switch SASLMechanism(mech) {
		case SASLAWSMSKIAM:
			want = iamLoginModule + " required;"
		case SASLGSSAPI:
			want = krb5LoginModule + ` required useKeyTab=true keyTab="..." principal="...";`
		}
		b.p.probs.errorf(b.c.Cluster+".sasl.jaas.config", "missing for SASL mechanism %s (got nothing, want %s); mm2go reads no JAAS files%s", mech, want, unsetNote(hasMech))
		return nil, "", false
	}
	entries, err := parseJAAS(jaasE.value)
	if err == nil && len(entries) != 1 {
		err = fmt.Errorf("%d login modules, want exactly one", len(entries))
	}
	if err != nil {
		b.p.probs.errorf(jaasE.origin, "malformed JAAS config: %v (got %s, want %s)", err, secretMask, jaasExample)
		return nil, "", false
	}
	je := entries[0]
	if je.module != module {
		b.p.probs.errorf(jaasE.origin, "login module does not match sasl.mechanism %s (got %q, want %s)%s", mech, je.module, module, unsetNote(hasMech))
		return nil, "", false
	}
	if cb, found := b.props["sasl.client.callback.handler.class"]; found && javaTrim(cb.value) != "" &&
		(SASLMechanism(mech) != SASLAWSMSKIAM || javaTrim(cb.value) != iamClientCallback) {
		b.p.probs.warn(cb.origin, "ignored: a Java class (got %q; mm2go reads credentials from sasl.jaas.config, and does what %s does itself)", cb.value, iamClientCallback)
	}
	iam := func() *mskIAM {
		return newMSKIAM(je.options, func(format string, args ...any) { b.p.probs.errorf(jaasE.origin, format, args...) },
			func(k string) {
				b.p.probs.info(jaasE.origin, "option %s ignored: it configures the Java library only", k)
			})
	}
	switch SASLMechanism(mech) {
	case SASLGSSAPI:
		m, ok := b.gssapiMechanism(jaasE.origin, je.options)
		return m, SASLGSSAPI, ok
	case SASLAWSMSKIAM:
		return iam().saslMechanism(), SASLAWSMSKIAM, true
	case SASLOAuthBearer:
		if h, found := b.setProp("sasl.login.callback.handler.class"); found && javaTrim(h.value) == iamOAuthCallback {
			return iam().oauthMechanism(), SASLOAuthBearer, true
		}
		m, ok := b.oauthMechanism(jaasE.origin, je.options)
		return m, SASLOAuthBearer, ok
	}
	user, hasUser := je.options["username"]
	pass, hasPass := je.options["password"]
	if !hasUser || !hasPass {
		b.p.probs.errorf(jaasE.origin, "missing username or password option (got %s, want %s)", secretMask, jaasExample)
		return nil, "", false
	}
	creds := saslCredentials{user: user, pass: Secret(pass), token: strings.EqualFold(je.options["tokenauth"], "true")}
	switch SASLMechanism(mech) {
	case SASLPlain:
		return plain.Auth{User: creds.user, Pass: creds.pass.Reveal()}.AsMechanism(), SASLPlain, true
	case SASLScramSHA256:
		return creds.scram().AsSha256Mechanism(), SASLScramSHA256, true
	default:
		return creds.scram().AsSha512Mechanism(), SASLScramSHA512, true
	}
}

// unsetNote explains a GSSAPI nobody asked for.
func unsetNote(hasMech bool) string {
	if hasMech {
		return ""
	}
	return "; sasl.mechanism is unset, and Kafka's default is GSSAPI"
}

// saslCredentials keeps the password typed as a Secret until it is handed
// to franz-go.
type saslCredentials struct {
	user  string
	pass  Secret
	token bool // "tokenauth=true": delegation-token SCRAM
}

func (c saslCredentials) scram() scram.Auth {
	return scram.Auth{User: c.user, Pass: c.pass.Reveal(), IsToken: c.token}
}

// jaasEntry is one login module of a JAAS configuration.
type jaasEntry struct {
	module  string
	flag    string
	options map[string]string
}

// parseJAAS parses a sasl.jaas.config value the way Kafka's JaasConfig
// does with java.io.StreamTokenizer: words made of letters, digits, '.',
// '-', '_' and '$' (not starting with a digit, '.' or '-'), quoted values
// ("..." or '...') with backslash escapes, // and /* */ comments, and each
// entry ending with ';'. Error messages never contain option values.
func parseJAAS(s string) ([]jaasEntry, error) {
	t := &jaasTokenizer{rs: []rune(s)}
	var out []jaasEntry
	for {
		tok := t.next()
		if tok.kind == tokEOF {
			break
		}
		if !tok.hasText() {
			return nil, errors.New("login module not specified")
		}
		e := jaasEntry{module: tok.text, options: map[string]string{}}
		flag := t.next()
		if flag.kind == tokEOF {
			return nil, errors.New("login module control flag not specified")
		}
		switch f := strings.ToUpper(flag.text); {
		case flag.hasText() && (f == "REQUIRED" || f == "REQUISITE" || f == "SUFFICIENT" || f == "OPTIONAL"):
			e.flag = strings.ToLower(f)
		default:
			return nil, errors.New("invalid login module control flag, want required, requisite, sufficient or optional")
		}
		terminated := false
		for {
			key := t.next()
			if key.kind == tokEOF {
				break
			}
			if key.kind == tokChar && key.char == ';' {
				terminated = true
				break
			}
			if !key.hasText() {
				return nil, errors.New("option name expected")
			}
			if eq := t.next(); eq.kind != tokChar || eq.char != '=' {
				return nil, fmt.Errorf("value not specified for option %q", key.text)
			}
			val := t.next()
			if !val.hasText() {
				return nil, fmt.Errorf("value not specified for option %q (quote values that contain digits first or special characters)", key.text)
			}
			e.options[key.text] = val.text
		}
		if !terminated {
			return nil, errors.New("JAAS config entry not terminated by a semicolon")
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, errors.New("login module not specified")
	}
	return out, nil
}

// Token kinds of jaasTokenizer.
const (
	tokEOF = iota
	tokWord
	tokQuoted
	tokNumber
	tokChar
)

// jaasToken is one token; text is set for words and quoted strings.
type jaasToken struct {
	kind int
	text string
	char rune
}

// hasText reports whether the token has a string value (Java's sval).
func (t jaasToken) hasText() bool { return t.kind == tokWord || t.kind == tokQuoted }

// jaasTokenizer is the subset of java.io.StreamTokenizer that Kafka's
// JaasConfig relies on.
type jaasTokenizer struct {
	rs []rune
	i  int
}

func isJAASWordStart(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0xA0 && c <= 0xFF || c == '_' || c == '$'
}

func isJAASWordPart(c rune) bool {
	return isJAASWordStart(c) || c >= '0' && c <= '9' || c == '.' || c == '-'
}

func isDigit(c rune) bool { return c >= '0' && c <= '9' }

// peek returns the rune at offset d from the current position, or 0.
func (t *jaasTokenizer) peek(d int) rune {
	if t.i+d < len(t.rs) {
		return t.rs[t.i+d]
	}
	return 0
}

func (t *jaasTokenizer) next() jaasToken {
	for t.i < len(t.rs) {
		c := t.rs[t.i]
		switch {
		case c <= ' ':
			t.i++
		case c == '/' && t.peek(1) == '*':
			t.i += 2
			for t.i < len(t.rs) && (t.rs[t.i] != '*' || t.peek(1) != '/') {
				t.i++
			}
			t.i = min(t.i+2, len(t.rs))
		case c == '/':
			// "//" comments and, as '/' is a comment character, "/" too.
			for t.i < len(t.rs) && t.rs[t.i] != '\n' && t.rs[t.i] != '\r' {
				t.i++
			}
		case isDigit(c) || c == '.' || c == '-' && (isDigit(t.peek(1)) || t.peek(1) == '.'):
			t.i++
			for t.i < len(t.rs) && (isDigit(t.rs[t.i]) || t.rs[t.i] == '.') {
				t.i++
			}
			return jaasToken{kind: tokNumber}
		case isJAASWordStart(c):
			start := t.i
			for t.i < len(t.rs) && isJAASWordPart(t.rs[t.i]) {
				t.i++
			}
			return jaasToken{kind: tokWord, text: string(t.rs[start:t.i])}
		case c == '"' || c == '\'':
			return t.quoted(c)
		default:
			t.i++
			return jaasToken{kind: tokChar, char: c}
		}
	}
	return jaasToken{kind: tokEOF}
}

// quoted reads a quoted string with StreamTokenizer's escapes; like Java it
// ends at the closing quote, a line break or the end of input.
func (t *jaasTokenizer) quoted(q rune) jaasToken {
	t.i++
	var sb strings.Builder
	for t.i < len(t.rs) {
		c := t.rs[t.i]
		if c == q {
			t.i++
			break
		}
		if c == '\n' || c == '\r' {
			break
		}
		t.i++
		if c != '\\' || t.i >= len(t.rs) {
			sb.WriteRune(c)
			continue
		}
		c = t.rs[t.i]
		t.i++
		switch c {
		case 'a':
			sb.WriteRune(7)
		case 'b':
			sb.WriteRune('\b')
		case 'f':
			sb.WriteRune('\f')
		case 'n':
			sb.WriteRune('\n')
		case 'r':
			sb.WriteRune('\r')
		case 't':
			sb.WriteRune('\t')
		case 'v':
			sb.WriteRune('\v')
		default:
			if c < '0' || c > '7' {
				sb.WriteRune(c)
				continue
			}
			n, maxDigits := int(c-'0'), 2
			if c > '3' {
				maxDigits = 1
			}
			for d := 0; d < maxDigits && t.i < len(t.rs) && t.rs[t.i] >= '0' && t.rs[t.i] <= '7'; d++ {
				n = n*8 + int(t.rs[t.i]-'0')
				t.i++
			}
			sb.WriteRune(rune(n))
		}
	}
	return jaasToken{kind: tokQuoted, text: sb.String()}
}
