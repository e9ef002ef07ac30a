package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// procSample is what the benchmark reads of a running process in /proc.
type procSample struct {
	// CPU is user plus system time of the process (all its threads) and of
	// the children it has waited for.
	CPU time.Duration
	// RSS is the resident set size now, HWM its peak so far (VmHWM); bytes.
	RSS, HWM int64
}

// clockTicks returns the kernel's USER_HZ, the unit of the CPU times in
// /proc/<pid>/stat; 100 when getconf is not available (the value on every
// common Linux build).
func clockTicks() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 100
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || n <= 0 {
		return 100
	}
	return n
}

// readProc samples process pid. ticks is the unit of /proc/<pid>/stat's
// times (see clockTicks).
func readProc(pid int, ticks int64) (procSample, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	cpu, err := parseStatCPU(stat, ticks)
	if err != nil {
		return procSample{}, fmt.Errorf("parse stat of pid %d: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procSample{}, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	rss, hwm, err := parseStatusMemory(status)
	if err != nil {
		return procSample{}, fmt.Errorf("parse status of pid %d: %w", pid, err)
	}
	return procSample{CPU: cpu, RSS: rss, HWM: hwm}, nil
}

// parseStatCPU returns utime+stime+cutime+cstime of a /proc/<pid>/stat line.
// The command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseStatCPU(b []byte, ticks int64) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("no ')' after the command name")
	}
	// After ") " come field 3 (state) onwards; utime is field 14.
	f := strings.Fields(string(b[i+1:]))
	const utime = 14 - 3
	if len(f) < utime+4 {
		return 0, fmt.Errorf("got %d fields after the command name, want at least %d", len(f), utime+4)
	}
	var sum int64
	for _, s := range f[utime : utime+4] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse cpu time %q: %w", s, err)
		}
		sum += n
	}
	return time.Duration(sum) * time.Second / time.Duration(ticks), nil
}

// parseStatusMemory returns VmRSS and VmHWM of /proc/<pid>/status in bytes.
func parseStatusMemory(b []byte) (rss, hwm int64, err error) {
	rss, hwm = -1, -1
	for line := range strings.SplitSeq(string(b), "\n") {
		var dst *int64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			dst = &rss
		case strings.HasPrefix(line, "VmHWM:"):
			dst = &hwm
		default:
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" {
			return 0, 0, fmt.Errorf("unexpected line %q", line)
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse %q: %w", line, err)
		}
		*dst = n << 10
	}
	if rss < 0 || hwm < 0 {
		return 0, 0, errors.New("no VmRSS or VmHWM line (kernel thread or zombie)")
	}
	return rss, hwm, nil
}

// loadAvg returns the 1-, 5- and 15-minute load averages.
func loadAvg() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		l[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return l
}
