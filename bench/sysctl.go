package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// sysctls sets kernel settings for the length of a run and puts back what
// it changed, in reverse order.
type sysctls struct {
	changed []setting // the values before
}

// setting is a kernel setting's dotted name and a value.
type setting struct{ name, value string }

// sysctlPath is the /proc/sys file of a dotted name (vm.dirty_ratio).
func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

// readSysctl returns a setting's value with its fields joined by one space.
func readSysctl(name string) (string, error) {
	b, err := os.ReadFile(sysctlPath(name))
	if err != nil {
		return "", err
	}
	return strings.Join(strings.Fields(string(b)), " "), nil
}

// set writes value unless the setting already has it.
func (s *sysctls) set(name, value string) error {
	old, err := readSysctl(name)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if old == value {
		return nil
	}
	if err := os.WriteFile(sysctlPath(name), []byte(value), 0o644); err != nil {
		return fmt.Errorf("set %s = %s: %w", name, value, err)
	}
	s.changed = append(s.changed, setting{name, old})
	return nil
}

// restore puts back every setting set changed and reports the failures.
func (s *sysctls) restore(logf func(string, ...any)) {
	for i := len(s.changed) - 1; i >= 0; i-- {
		v := s.changed[i]
		if err := os.WriteFile(sysctlPath(v.name), []byte(v.value), 0o644); err != nil {
			logf("restore %s to %q: %v", v.name, v.value, err)
		}
	}
	s.changed = nil
}

// Writeback held for a run: the brokers' data stays in the page cache
// instead of going to disk 30 s after it was written (the kernel's
// vm.dirty_expire_centisecs). On a machine where the brokers, the
// replicator and the load generators share two CPUs and one disk, each
// such flush wrote 200-500 MB within a second or so and put a 100-220 ms
// stall into whatever latency window it fell in (in a run of 2026-12-05
// every 100 ms of sending with a delay over 100 ms lay within 0.3 s of
// one), so a contender's p99 said more about the flush's timing than about
// the contender. Deleted topics' data is dropped
// unwritten; the kernel still writes back above the raised ratios.
var holdWritebackSettings = []setting{
	{"vm.dirty_expire_centisecs", "360000"},
	{"vm.dirty_background_ratio", "40"},
	{"vm.dirty_ratio", "60"},
}

// holdWriteback applies holdWritebackSettings, or none of them: on an error
// it puts back what it changed. A machine that limits dirty pages in bytes
// (vm.dirty_bytes, vm.dirty_background_bytes) is left as it is: the ratios
// would replace its limits, and restoring them would not bring the bytes
// back.
func (s *sysctls) holdWriteback(logf func(string, ...any)) error {
	for _, name := range []string{"vm.dirty_bytes", "vm.dirty_background_bytes"} {
		if v, err := readSysctl(name); err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		} else if v != "0" {
			return fmt.Errorf("%s is set (%s)", name, v)
		}
	}
	for _, v := range holdWritebackSettings {
		if err := s.set(v.name, v.value); err != nil {
			s.restore(logf)
			return err
		}
	}
	return nil
}
