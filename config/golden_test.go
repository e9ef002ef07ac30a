package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// goldenEnv is the environment ${env:...} references see in golden tests.
var goldenEnv = map[string]string{
	"MM2GO_TEST_BOOTSTRAP": "env-a1:9092",
	"MM2GO_TEST_PASSWORD":  "env-secret",
	"NOT_ALLOWED":          "x",
}

// render formats the outcome of one load: warnings, then the error or the
// dump.
func render(c *Config, ws []Warning, err error) string {
	var sb strings.Builder
	sb.WriteString("# warnings\n")
	for _, w := range warningStrings(ws) {
		sb.WriteString(w + "\n")
	}
	if err != nil {
		sb.WriteString("# error\n" + err.Error() + "\n")
		return sb.String()
	}
	sb.WriteString("# dump\n" + c.Dump())
	return sb.String()
}

// compareGolden checks got against testdata/<name>.golden, or rewrites it
// with -update.
func compareGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./config -run TestGolden -update to create it")
	require.Equal(t, string(want), got)
}

// TestGolden loads every testdata/*.properties file: files named bad-* must
// fail with the joined error text in their golden file, all others must
// load and dump as recorded. The seed file is the MM2 config mm2go must
// accept unchanged; kafka-example is Kafka's own sample; precedence holds
// the inheritance examples of Kafka's MirrorMakerConfigTest.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.properties"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".properties")
		if name == "secrets" {
			continue // a provider file, not an MM2 config
		}
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			c, ws, err := parse(data, "testdata", func(k string) (string, bool) {
				v, ok := goldenEnv[k]
				return v, ok
			})
			if strings.HasPrefix(name, "bad-") {
				require.Error(t, err)
				require.Nil(t, c)
			} else {
				require.NoError(t, err)
			}
			compareGolden(t, name, render(c, ws, err))
		})
	}
}

// TestLoadMatchesParse checks that Load reads the file and resolves
// relative paths against its directory.
func TestLoadMatchesParse(t *testing.T) {
	c, ws, err := Load(filepath.Join("testdata", "seed.properties"))
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join("testdata", "seed.properties"))
	require.NoError(t, err)
	c2, ws2, err := Parse(data, "testdata")
	require.NoError(t, err)
	require.Equal(t, c.Dump(), c2.Dump())
	require.Equal(t, ws, ws2)

	_, _, err = Load(filepath.Join("testdata", "does-not-exist.properties"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
