package config

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

const providersHeader = `
config.providers = file, env, dir
config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider
config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider
config.providers.dir.class = org.apache.kafka.common.config.provider.DirectoryConfigProvider
`

func TestConfigProviders(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{
		"creds.properties":           []byte("user = alice\npassword = file-secret\nbootstrap = f1:9092\n"),
		"secrets/topic-list":         []byte("orders, payments"),
		"secrets/with-newline":       []byte("x\n"),
		"elsewhere/other.properties": []byte("k = v\n"),
	})
	env := map[string]string{"MM2GO_PW": "env-secret", "MM2GO_HOST": "e1:9092", "OTHER": "x"}
	tests := []struct {
		name  string
		extra string
		check func(t *testing.T, c *Config)
		err   string
	}{
		{name: "file provider", extra: "a.bootstrap.servers = ${file:creds.properties:bootstrap}\n",
			check: func(t *testing.T, c *Config) {
				require.Equal(t, []string{"f1:9092"}, c.Cluster("a").BootstrapServers)
			}},
		{name: "absolute file path", extra: "a.bootstrap.servers = ${file:" + filepath.Join(dir, "creds.properties") + ":bootstrap}\n",
			check: func(t *testing.T, c *Config) {
				require.Equal(t, []string{"f1:9092"}, c.Cluster("a").BootstrapServers)
			}},
		{name: "env provider inside a value", extra: "b.bootstrap.servers = ${env:MM2GO_HOST},b2:9092\n",
			check: func(t *testing.T, c *Config) {
				require.Equal(t, []string{"e1:9092", "b2:9092"}, c.Cluster("b").BootstrapServers)
			}},
		{name: "dir provider keeps the content verbatim", extra: "a->b.topics = ${dir:secrets:topic-list}\na->b.groups = ${dir:secrets:with-newline}\n",
			check: func(t *testing.T, c *Config) {
				require.Equal(t, []string{"orders", "payments"}, c.Flow("a", "b").Topics)
				require.Equal(t, []string{"x"}, c.Flow("a", "b").Groups, "the list parser trims the newline")
			}},
		{name: "resolved secret stays masked", extra: "a.security.protocol = SASL_PLAINTEXT\na.sasl.mechanism = PLAIN\n" +
			`a.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required username="${file:creds.properties:user}" password="${env:MM2GO_PW}";` + "\n",
			check: func(t *testing.T, c *Config) {
				cl := c.Flow("a", "b").Client(RoleSourceAdmin)
				require.Equal(t, "<secret>", cl.Props()["sasl.jaas.config"])
				require.NotContains(t, c.Dump(), "env-secret")
				require.Equal(t, SASLPlain, cl.SASLMechanism)
			}},
		{name: "no colon is no reference", extra: "a->b.topics = ${NOT_A_REF}\n",
			check: func(t *testing.T, c *Config) {
				require.Equal(t, []string{"${NOT_A_REF}"}, c.Flow("a", "b").Topics)
			}},
		{name: "allowed paths", extra: "config.providers.file.param.allowed.paths = " + dir + "\na.bootstrap.servers = ${file:creds.properties:bootstrap}\n",
			check: func(t *testing.T, c *Config) {
				require.Equal(t, []string{"f1:9092"}, c.Cluster("a").BootstrapServers)
			}},
		{name: "outside allowed paths", extra: "config.providers.file.param.allowed.paths = " + filepath.Join(dir, "secrets") +
			"\na.bootstrap.servers = ${file:creds.properties:bootstrap}\n",
			err: `a.bootstrap.servers: cannot resolve reference (got "${file:creds.properties:bootstrap}", want a path inside allowed.paths of config provider "file", not ` + filepath.Join(dir, "creds.properties") + ")"},
		{name: "env allowlist", extra: "config.providers.env.param.allowlist.pattern = MM2GO_.*\na->b.topics = ${env:OTHER}\n",
			err: `a->b.topics: cannot resolve reference (got "${env:OTHER}", want a variable matching allowlist.pattern of provider "env")`},
		{name: "missing env var", extra: "a->b.topics = ${env:NOPE}\n",
			err: `a->b.topics: cannot resolve reference (got "${env:NOPE}", want environment variable NOPE to be set)`},
		{name: "missing file", extra: "a->b.topics = ${file:nope.properties:k}\n",
			err: `a->b.topics: cannot resolve reference (got "${file:nope.properties:k}", want a readable properties file (open ` + filepath.Join(dir, "nope.properties")},
		{name: "missing key", extra: "a->b.topics = ${file:creds.properties:nope}\n",
			err: `a->b.topics: cannot resolve reference (got "${file:creds.properties:nope}", want key "nope" in ` + filepath.Join(dir, "creds.properties") + ")"},
		{name: "missing dir file", extra: "a->b.topics = ${dir:secrets:nope}\n",
			err: `a->b.topics: cannot resolve reference (got "${dir:secrets:nope}", want a file "nope" in directory ` + filepath.Join(dir, "secrets") + ")"},
		{name: "dir escape", extra: "a->b.topics = ${dir:secrets:../creds.properties}\n",
			err: `want a plain file name, not "../creds.properties"`},
		{name: "undeclared provider", extra: "a->b.topics = ${vault:secret/data:topics}\n",
			err: `a->b.topics: reference to undeclared config provider "vault" (got "${vault:secret/data:topics}"`},
		{name: "secret value never in errors", extra: "a.ssl.key.password = ${env:MM2GO_PW}x${env:NOPE}\n",
			err: `a.ssl.key.password: cannot resolve reference (got "${env:NOPE}", want environment variable NOPE to be set)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := load(t, twoClusters+providersHeader+tt.extra, env, dir)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				require.NotContains(t, err.Error(), "env-secret")
				require.NotContains(t, err.Error(), "file-secret")
				return
			}
			require.NoError(t, err)
			tt.check(t, c)
		})
	}
}

func TestConfigProviderDeclarations(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"missing class", "config.providers = file\n",
			"config.providers.file.class: missing class of declared config provider \"file\""},
		{"unknown class", "config.providers = v\nconfig.providers.v.class = com.example.Vault\n",
			`config.providers.v.class: unsupported config provider class (got "com.example.Vault"`},
		{"bad allowlist", "config.providers = env\nconfig.providers.env.class = " + envProviderClass + "\nconfig.providers.env.param.allowlist.pattern = (\n",
			"config.providers.env.param.allowlist.pattern: invalid regular expression"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Contains(t, loadErr(t, twoClusters+tt.text), tt.want)
		})
	}
	_, ws := mustLoad(t, twoClusters+"config.providers = env\nconfig.providers.env.class = "+envProviderClass+
		"\nconfig.providers.env.param.foo = 1\nconfig.providers.other.class = x\n")
	require.True(t, hasWarning(ws, "config.providers.env.param.foo", "unknown parameter"))
	require.True(t, hasWarning(ws, "config.providers.other.class", "not listed in config.providers"))
}
