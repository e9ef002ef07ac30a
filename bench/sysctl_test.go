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

// TestHoldWriteback: holdWriteback sets every setting of
// holdWritebackSettings and restore puts back each one's value before.
// Needs root; skipped where the machine limits dirty pages in bytes, which
// holdWriteback leaves alone.
func TestHoldWriteback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: writes /proc/sys")
	}
	before := map[string]string{}
	for _, v := range holdWritebackSettings {
		old, err := readSysctl(v.name)
		require.NoError(t, err)
		before[v.name] = old
	}
	var s sysctls
	defer s.restore(t.Logf)
	if err := s.holdWriteback(t.Logf); err != nil {
		t.Skipf("writeback not held on this machine: %v", err)
	}
	for _, v := range holdWritebackSettings {
		got, err := readSysctl(v.name)
		require.NoError(t, err)
		require.Equal(t, v.value, got, v.name)
	}
	s.restore(t.Fatalf)
	for name, old := range before {
		got, err := readSysctl(name)
		require.NoError(t, err)
		require.Equal(t, old, got, name)
	}
}
