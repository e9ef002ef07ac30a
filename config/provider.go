package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/magiconair/properties"
)

// Java class names of the Kafka ConfigProviders mm2go implements.
const (
	fileProviderClass = "org.apache.kafka.common.config.provider.FileConfigProvider"
	dirProviderClass  = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
	envProviderClass  = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
)

// providerKind is one of the three supported ConfigProvider implementations.
type providerKind int

const (
	providerFile providerKind = iota
	providerDir
	providerEnv
)

// provider is one entry of "config.providers" with its parameters.
type provider struct {
	name         string
	kind         providerKind
	allowedPaths []string       // "allowed.paths" (file, dir); nil allows every path
	allowlist    *regexp.Regexp // "allowlist.pattern" (env); nil allows every variable
}

// variablePattern is Kafka's ConfigTransformer pattern for
// ${provider:[path:]key}.
const variablePattern = `\$\{([^}]*?):(([^}]*?):)?([^}]*?)\}`

// parseProviders reads "config.providers", "config.providers.<name>.class"
// and "config.providers.<name>.param.*".
func (p *parser) parseProviders() map[string]*provider {
	out := map[string]*provider{}
	names := parseList(p.raw.values[keyConfigProviders])
	for _, name := range names {
		if name == "" {
			p.probs.errorf(keyConfigProviders, "empty provider name (got %q, want a comma-separated list of names)",
				p.raw.values[keyConfigProviders])
			continue
		}
		classKey := keyConfigProviders + "." + name + ".class"
		class, ok := p.raw.values[classKey]
		class = strings.TrimSpace(class)
		if !ok || class == "" {
			p.probs.errorf(classKey, "missing class of declared config provider %q (got nothing, want %s, %s or %s)",
				name, fileProviderClass, dirProviderClass, envProviderClass)
			continue
		}
		pr := &provider{name: name}
		switch class {
		case fileProviderClass:
			pr.kind = providerFile
		case dirProviderClass:
			pr.kind = providerDir
		case envProviderClass:
			pr.kind = providerEnv
		default:
			p.probs.errorf(classKey, "unsupported config provider class (got %q, want %s, %s or %s)",
				class, fileProviderClass, dirProviderClass, envProviderClass)
			continue
		}
		out[name] = pr
	}
	// Parameters and stray provider keys.
	for _, k := range p.raw.keys {
		if k == keyConfigProviders || !strings.HasPrefix(k, keyConfigProviders+".") {
			continue
		}
		rest := strings.TrimPrefix(k, keyConfigProviders+".")
		var pr *provider
		var sub string
		for name, cand := range out {
			if strings.HasPrefix(rest, name+".") && (pr == nil || len(name) > len(pr.name)) {
				pr, sub = cand, strings.TrimPrefix(rest, name+".")
			}
		}
		if pr == nil {
			if !declared(names, rest) {
				p.probs.warn(k, "ignored: the provider is not listed in config.providers")
			}
			continue
		}
		v := p.raw.values[k]
		switch {
		case sub == "class":
		case sub == "param.allowed.paths" && pr.kind != providerEnv:
			for _, ap := range parseList(v) {
				if ap != "" {
					pr.allowedPaths = append(pr.allowedPaths, filepath.Clean(p.abs(ap)))
				}
			}
		case sub == "param.allowlist.pattern" && pr.kind == providerEnv:
			re, err := regexp.Compile(`^(?:` + v + `)$`)
			if err != nil {
				p.probs.errorf(k, "invalid regular expression (got %q, want RE2 syntax: %v)", v, err)
				continue
			}
			pr.allowlist = re
		default:
			p.probs.warn(k, "ignored: unknown parameter of config provider %q", pr.name)
		}
	}
	return out
}

// declared reports whether rest ("<name>.<x>") belongs to a name in names,
// so that a declared provider with a bad class is not reported twice.
func declared(names []string, rest string) bool {
	for _, n := range names {
		if strings.HasPrefix(rest, n+".") {
			return true
		}
	}
	return false
}

// resolveAll replaces every ${provider:path:key} reference in every value
// except the config.providers* keys, as MM2 does for worker and client
// configs (and Connect does for connector configs before a connector sees
// them). A reference to an undeclared provider or a value that cannot be
// found is an error naming the key and the reference, never the value.
func (p *parser) resolveAll() {
	providers := p.parseProviders()
	re := regexp.MustCompile(variablePattern)
	for _, k := range p.raw.keys {
		if k == keyConfigProviders || strings.HasPrefix(k, keyConfigProviders+".") {
			continue
		}
		v := p.raw.values[k]
		if !strings.Contains(v, "${") {
			continue
		}
		failed := false
		out := re.ReplaceAllStringFunc(v, func(ref string) string {
			m := re.FindStringSubmatch(ref)
			name, path, key := m[1], m[3], m[4]
			pr, ok := providers[name]
			if !ok {
				failed = true
				p.probs.errorf(k, "reference to undeclared config provider %q (got %q, want a provider listed in config.providers with its class)",
					name, ref)
				return ref
			}
			val, err := p.lookup(pr, path, key)
			if err != nil {
				failed = true
				p.probs.errorf(k, "cannot resolve reference (got %q, want %v)", ref, err)
				return ref
			}
			return val
		})
		if failed {
			if p.probs.broken == nil {
				p.probs.broken = map[string]bool{}
			}
			p.probs.broken[k] = true
			continue
		}
		p.raw.values[k] = out
	}
}

// lookup returns the value of key at path from provider pr. Its errors are
// phrased as what was wanted, for the "(got X, want Y)" part of a message.
func (p *parser) lookup(pr *provider, path, key string) (string, error) {
	switch pr.kind {
	case providerEnv:
		if path != "" {
			return "", fmt.Errorf("${%s:VARIABLE} without a path, which EnvVarConfigProvider does not take", pr.name)
		}
		if pr.allowlist != nil && !pr.allowlist.MatchString(key) {
			return "", fmt.Errorf("a variable matching allowlist.pattern of provider %q", pr.name)
		}
		v, ok := p.lookupEnv(key)
		if !ok {
			return "", fmt.Errorf("environment variable %s to be set", key)
		}
		return v, nil
	case providerFile:
		file, err := p.allowedPath(pr, path)
		if err != nil {
			return "", err
		}
		data, err := p.readFile(file)
		if err != nil {
			return "", fmt.Errorf("a readable properties file (%w)", err)
		}
		l := &properties.Loader{Encoding: properties.UTF8, DisableExpansion: true}
		props, err := l.LoadBytes(data)
		if err != nil {
			return "", fmt.Errorf("a valid properties file %s (%w)", file, err)
		}
		v, ok := props.Get(key)
		if !ok {
			return "", fmt.Errorf("key %q in %s", key, file)
		}
		return v, nil
	default: // providerDir
		dir, err := p.allowedPath(pr, path)
		if err != nil {
			return "", err
		}
		if key == "" || strings.ContainsAny(key, `/\`) || key == "." || key == ".." {
			return "", fmt.Errorf("a plain file name, not %q", key)
		}
		file := filepath.Join(dir, key)
		st, err := os.Stat(file)
		if err != nil {
			return "", fmt.Errorf("a file %q in directory %s", key, dir)
		}
		if !st.Mode().IsRegular() {
			return "", fmt.Errorf("%s to be a regular file", file)
		}
		data, err := p.readFile(file)
		if err != nil {
			return "", fmt.Errorf("a readable file (%w)", err)
		}
		return string(data), nil
	}
}

// allowedPath resolves path against the base directory and checks it
// against the provider's "allowed.paths".
func (p *parser) allowedPath(pr *provider, path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("${%s:PATH:KEY} with a path", pr.name)
	}
	abs := filepath.Clean(p.abs(path))
	if pr.allowedPaths == nil {
		return abs, nil
	}
	for _, ap := range pr.allowedPaths {
		if rel, err := filepath.Rel(ap, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return abs, nil
		}
	}
	return "", fmt.Errorf("a path inside allowed.paths of config provider %q, not %s", pr.name, abs)
}
