package main

import (
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSysctlsRestore: set changes a kernel setting, restore puts back the
// value it had, and a setting that already has the value is left alone.
// Needs root (it is skipped otherwise); the setting changed,
// vm.dirty_expire_centisecs, is restored within the test.
func TestSysctlsRestore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: writes /proc/sys")
	}
	const name = "vm.dirty_expire_centisecs"
	old, err := readSysctl(name)
	require.NoError(t, err)
	n, err := strconv.Atoi(old)
	require.NoError(t, err)

	var s sysctls
	defer s.restore(t.Logf)
	require.NoError(t, s.set(name, old))
	require.Empty(t, s.changed, "a setting that has the value is not changed")
	require.NoError(t, s.set(name, strconv.Itoa(n+1)))
	got, err := readSysctl(name)
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(n+1), got)

	s.restore(t.Fatalf)
	got, err = readSysctl(name)
	require.NoError(t, err)
	require.Equal(t, old, got)
	require.Empty(t, s.changed)

	require.Error(t, s.set("vm.no_such_setting", "1"))
}
