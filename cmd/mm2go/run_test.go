package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHelpExitsZero: every command prints its usage for -h and --help and
// exits 0; bad flags still exit 2.
func TestHelpExitsZero(t *testing.T) {
	for _, cmd := range [][]string{
		{"run"}, {"demo"}, {"validate"}, {"topology"}, {"status"},
		{"offsets"}, {"offsets", "translate"}, {"offsets", "apply"},
		{"failover"}, {"failover", "check"}, {"verify"},
	} {
		for _, help := range []string{"-h", "--help"} {
			var stdout, stderr bytes.Buffer
			code := run(append(append([]string{}, cmd...), help), &stdout, &stderr)
			require.Equal(t, exitOK, code, "mm2go %s %s: %s", strings.Join(cmd, " "), help, stderr.String())
			require.Contains(t, strings.ToLower(stdout.String()+stderr.String()), "usage", "mm2go %s %s prints its usage", strings.Join(cmd, " "), help)
		}
		var stdout, stderr bytes.Buffer
		require.Equal(t, exitUsage, run(append(append([]string{}, cmd...), "--no-such-flag"), &stdout, &stderr), "mm2go %s --no-such-flag", strings.Join(cmd, " "))
	}
}
