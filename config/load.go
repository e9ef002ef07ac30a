package config

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/magiconair/properties"
)

// Load reads and validates the MM2 dedicated-mode properties file at path.
// Relative file paths inside it (TLS stores, config-provider files) are
// resolved against the file's directory.
//
// The warnings (unknown or ignored keys, Java-only settings mm2go ignores,
// keys that have no effect in MM2 either) are returned even when err is not
// nil. err joins every problem found, one "key: problem (got X, want Y)" line
// each; when err is not nil the *Config is nil, so nothing is half-applied.
// Only the error for an unreadable properties file wraps an underlying error
// (errors.Is(err, fs.ErrNotExist) works); the others are plain text.
func Load(path string) (*Config, []Warning, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read config file: %w", err)
	}
	return Parse(data, filepath.Dir(path))
}

// Parse is Load for file contents already in memory. baseDir resolves
// relative file paths; environment variables for ${env:...} references come
// from the process environment.
func Parse(data []byte, baseDir string) (*Config, []Warning, error) {
	return parse(data, baseDir, os.LookupEnv)
}

// parse is Parse with an injectable environment.
func parse(data []byte, baseDir string, lookupEnv func(string) (string, bool)) (*Config, []Warning, error) {
	l := &properties.Loader{Encoding: properties.UTF8, DisableExpansion: true}
	pp, err := l.LoadBytes(data)
	if err != nil {
		return nil, nil, fmt.Errorf("parse properties: %w", err)
	}
	p := &parser{
		baseDir:   baseDir,
		lookupEnv: lookupEnv,
		raw: rawConfig{
			values: map[string]string{},
			pos:    map[string]int{},
		},
		files: map[string]fileResult{},
	}
	p.probs.pos = func(k string) int {
		if i, ok := p.raw.pos[k]; ok {
			return i
		}
		return -1
	}
	for i, k := range pp.Keys() {
		v, _ := pp.Get(k)
		p.raw.keys = append(p.raw.keys, k)
		p.raw.values[k] = v
		p.raw.pos[k] = i
	}
	c := p.build()
	warnings := p.probs.warnings()
	if err := p.probs.err(); err != nil {
		return nil, warnings, err
	}
	return c, warnings, nil
}

// rawConfig is the properties file after ${...} resolution.
type rawConfig struct {
	keys   []string          // file order
	values map[string]string // values after ${...} resolution
	pos    map[string]int    // index in keys
}

// parser holds the state of one Load.
type parser struct {
	baseDir   string
	lookupEnv func(string) (string, bool)
	raw       rawConfig
	probs     problems
	files     map[string]fileResult
	aliases   []string
}

// fileResult caches one file read so that each file is read once per load.
type fileResult struct {
	data []byte
	err  error
}

// abs resolves a path against the base directory.
func (p *parser) abs(path string) string {
	if filepath.IsAbs(path) || p.baseDir == "" {
		return path
	}
	return filepath.Join(p.baseDir, path)
}

// readFile reads an absolute path once per load.
func (p *parser) readFile(path string) ([]byte, error) {
	if r, ok := p.files[path]; ok {
		return r.data, r.err
	}
	data, err := os.ReadFile(path)
	p.files[path] = fileResult{data: data, err: err}
	return data, err
}

// fileDigest returns a short digest of a file's contents for fingerprints.
func fileDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return fmt.Sprintf("%x", sum[:16])
}

// entry is one property value and the key it came from in the file.
type entry struct {
	value  string
	origin string // raw key in the file; "" for values mm2go fills in
}

// entries is a property map that remembers where each value came from.
type entries map[string]entry

// putIfAbsent sets k only if it has no value yet (Java's Map.putIfAbsent).
func (e entries) putIfAbsent(k string, v entry) {
	if _, ok := e[k]; !ok {
		e[k] = v
	}
}

// build parses, fills in defaults and validates the whole file.
func (p *parser) build() *Config {
	p.resolveAll()
	p.aliases = p.parseClusters()
	p.classifyKeys()

	c := &Config{}
	for _, a := range p.aliases {
		cl := &Cluster{Alias: a}
		if e, ok := p.clusterProps(a)[keyBootstrapServers]; ok {
			cl.BootstrapServers = parseList(e.value)
		}
		c.Clusters = append(c.Clusters, cl)
	}
	for _, pair := range clusterPairs(p.aliases) {
		c.Flows = append(c.Flows, p.buildFlow(pair[0], pair[1]))
	}
	for _, f := range c.Flows {
		switch f.provenanceMode {
		case "true":
			f.ProvenanceHeaders = true
		case "auto":
			back := c.Flow(f.Target, f.Source)
			f.ProvenanceHeaders = f.ReplicationPolicyClass == PolicyIdentity && f.Enabled && back != nil && back.Enabled
		}
		if f.ProvenanceHeaders && f.CopyMode == CopyBatches {
			// Forwarded batches cannot carry a header more.
			if f.copyModeOrigin != "" {
				p.probs.warn(f.copyModeOrigin, "no effect for flow %s: provenance headers are added to records, so the flow copies records one by one (mm2go.copy.mode = records), without fencing", f.Name())
			} else if f.fencingOrigin != "" && f.Fencing == FencingEpoch {
				p.probs.warn(f.fencingOrigin, "no effect for flow %s: provenance headers are added to records, and the record copy mode does not fence older writers", f.Name())
			}
			f.CopyMode, f.Fencing = CopyRecords, FencingNone
		}
		if f.FetchOverlap && f.CopyMode == CopyRecords {
			p.probs.warn(f.fetchOverlapOrigin, "no effect for flow %s: only the batches copy mode fetches with its own requests (the flow copies records)", f.Name())
		}
	}
	p.validate(c)
	return c
}

// parseClusters reads and checks "clusters".
func (p *parser) parseClusters() []string {
	v, ok := p.raw.values[keyClusters]
	if !ok {
		p.probs.errorf(keyClusters, "missing (got nothing, want a comma-separated list of cluster aliases)")
		return nil
	}
	list := parseList(v)
	if len(list) == 0 {
		p.probs.errorf(keyClusters, "empty (got %q, want a comma-separated list of cluster aliases)", v)
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, a := range list {
		switch {
		case a == "":
			p.probs.errorf(keyClusters, "empty cluster alias (got %q, want non-empty aliases)", v)
		case strings.Contains(a, "->"):
			p.probs.errorf(keyClusters, "cluster alias contains \"->\" (got %q, want an alias without \"->\")", a)
		case seen[a]:
			p.probs.errorf(keyClusters, "duplicate cluster alias (got %q twice, want each alias once)", a)
		default:
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// parseList splits a Kafka LIST value: trimmed, empty means no elements,
// otherwise split on \s*,\s* keeping empty elements.
func parseList(v string) []string {
	v = javaTrim(v)
	if v == "" {
		return []string{}
	}
	parts := strings.Split(v, ",")
	for i, s := range parts {
		parts[i] = strings.Trim(s, " \t\n\v\f\r")
	}
	return parts
}

// javaTrim removes leading and trailing characters <= U+0020, like Java's
// String.trim, which Kafka's ConfigDef applies to every value.
func javaTrim(v string) string {
	return strings.TrimFunc(v, func(r rune) bool { return r <= ' ' })
}

// parseBool parses a Kafka BOOLEAN: trimmed, case-insensitive true or false.
func parseBool(v string) (bool, bool) {
	switch t := javaTrim(v); {
	case strings.EqualFold(t, "true"):
		return true, true
	case strings.EqualFold(t, "false"):
		return false, true
	}
	return false, false
}

// clusterProps assembles the properties of one cluster exactly like MM2's
// MirrorMakerConfig.clusterProps: "<alias>.*" keys with the
// prefix stripped, CLIENT_CONFIG_DEF keys fanned out to producer./consumer./
// admin., then top-level CLIENT_CONFIG_DEF keys filling the gaps.
func (p *parser) clusterProps(alias string) entries {
	out := entries{}
	prefix := alias + "."
	for _, k := range p.raw.keys {
		if strings.HasPrefix(k, prefix) {
			out[k[len(prefix):]] = entry{value: p.raw.values[k], origin: k}
		}
	}
	for _, k := range clientConfigKeys() {
		if e, ok := out[k]; ok {
			out.putIfAbsent("producer."+k, e)
			out.putIfAbsent("consumer."+k, e)
			out.putIfAbsent("admin."+k, e)
		}
	}
	for _, k := range clientConfigKeys() {
		if v, ok := p.raw.values[k]; ok {
			e := entry{value: v, origin: k}
			out.putIfAbsent("producer."+k, e)
			out.putIfAbsent("consumer."+k, e)
			out.putIfAbsent("admin."+k, e)
			out.putIfAbsent(k, e)
		}
	}
	return out
}

// connectorConfig assembles the connector config of flow s->t exactly like
// MM2's connectorBaseConfig, keeping the origin of every value.
func (p *parser) connectorConfig(s, t string) entries {
	conn := entries{}
	for _, k := range p.raw.keys {
		if isConnectorKey(k) || strings.HasPrefix(k, keyConfigProviders) || strings.HasPrefix(k, "replication.policy") {
			conn[k] = entry{value: p.raw.values[k], origin: k}
		}
	}
	for side, alias := range map[string]string{"source": s, "target": t} {
		for k, e := range p.clusterProps(alias) {
			if hasClientPrefix(k) {
				conn[side+"."+k] = e
			} else {
				conn[side+".cluster."+k] = e
			}
		}
	}
	prefix := s + "->" + t + "."
	for _, k := range p.raw.keys {
		if strings.HasPrefix(k, prefix) {
			conn[k[len(prefix):]] = entry{value: p.raw.values[k], origin: k}
		}
	}
	return conn
}

// workerConfig assembles the Connect worker config of flow s->t like MM2's
// workerConfig: the target cluster's properties, overridden by
// top-level keys with a worker prefix.
func (p *parser) workerConfig(t string) entries {
	w := p.clusterProps(t)
	for _, k := range p.raw.keys {
		if hasWorkerPrefix(k) {
			w[k] = entry{value: p.raw.values[k], origin: k}
		}
	}
	return w
}

// validate applies the checks that span flows and clusters.
func (p *parser) validate(c *Config) {
	if len(p.aliases) == 0 {
		return
	}
	needs := map[string]bool{}
	for _, f := range c.Flows {
		if f.Enabled {
			needs[f.Source], needs[f.Target] = true, true
		}
	}
	for _, cl := range c.Clusters {
		if len(cl.BootstrapServers) > 0 {
			continue
		}
		if needs[cl.Alias] {
			p.probs.errorf(cl.Alias+"."+keyBootstrapServers,
				"missing for cluster %q of an enabled flow (got nothing, want host:port[,host:port...])", cl.Alias)
		} else {
			p.probs.warn(cl.Alias+"."+keyBootstrapServers,
				"missing: cluster %q can take part only in disabled flows", cl.Alias)
		}
	}
	if len(c.EnabledFlows()) == 0 {
		p.probs.errs = append(p.probs.errs, finding{pos: 1 << 30, key: "<source>-><target>.enabled",
			msg: "no source->target replication flows (got none enabled, want at least one <source>-><target>.enabled = true)"})
	}
}
