package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The scale phase: mm2go's catch-up of the backlog with 1, 2 and 3
// instances on the same file, the flow split into tasks (tasks.max), each
// instance held to a CPU budget (a cgroup CPU quota), so that what several
// instances add shows on a machine with few cores. The brokers run without
// a quota: where the rate stops growing with the instances, they are the
// limit.

// scaleName is the contender of n instances.
func scaleName(n int) string { return "mm2go-x" + strconv.Itoa(n) }

// scaleContenders returns the scale phase's contenders: 1 to most
// instances of mm2go with default settings and tasks.max = tasks.
func scaleContenders(most, tasks int, cpu float64) []*contender {
	var out []*contender
	for n := 1; n <= most; n++ {
		out = append(out, &contender{
			name: scaleName(n), kind: kindMM2go, instances: n, cpuQuota: cpu,
			props: []string{"tasks.max = " + strconv.Itoa(tasks)},
			about: fmt.Sprintf("%d mm2go instance(s) on one file, `tasks.max = %d`, each held to %.2f CPU (cgroup quota)", n, tasks, cpu),
		})
	}
	return out
}

// procSet is the processes of one run: one, or the instances of a scale
// contender. It is measured as one: CPU and memory summed.
type procSet struct {
	ps      []*proc
	cgroups []string // created for the processes, removed by stop
}

// start starts cmds, each with its output in dir/process.log (one) or
// dir/process-<i>.log, and with quota > 0 each in a cgroup of its own
// limited to quota CPUs.
func startSet(cmds []*exec.Cmd, dir string, quota float64, name string) (*procSet, error) {
	s := &procSet{}
	for i, cmd := range cmds {
		log := "process.log"
		if len(cmds) > 1 {
			log = fmt.Sprintf("process-%d.log", i+1)
		}
		p, err := startProcLog(cmd, filepath.Join(dir, log))
		if err != nil {
			_, _, _ = s.stop(time.Second) // the start error is the one to report
			return nil, err
		}
		s.ps = append(s.ps, p)
		if quota > 0 {
			cg, err := limitCPU(fmt.Sprintf("%s-%d", name, i+1), p.pid(), quota)
			if err != nil {
				_, _, _ = s.stop(time.Second)
				return nil, err
			}
			s.cgroups = append(s.cgroups, cg)
		}
	}
	return s, nil
}

// exited returns the first process that exited, if one did.
func (s *procSet) exited() *proc {
	for _, p := range s.ps {
		if p.exited() {
			return p
		}
	}
	return nil
}

// sample sums the processes' samples.
func (s *procSet) sample(ticks int64) (procSample, error) {
	var sum procSample
	for _, p := range s.ps {
		x, err := readProc(p.pid(), ticks)
		if err != nil {
			return procSample{}, err
		}
		sum.CPU, sum.RSS, sum.HWM = sum.CPU+x.CPU, sum.RSS+x.RSS, sum.HWM+x.HWM
	}
	return sum, nil
}

// stop stops every process at once (see proc.stop) and removes the
// cgroups; it returns the longest stop and whether one was killed, and the
// first exit error.
func (s *procSet) stop(timeout time.Duration) (took time.Duration, killed bool, err error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range s.ps {
		wg.Go(func() {
			t, k := p.stop(timeout)
			mu.Lock()
			defer mu.Unlock()
			took, killed = max(took, t), killed || k
			if err == nil {
				err = p.err
			}
		})
	}
	wg.Wait()
	for _, cg := range s.cgroups {
		_ = os.Remove(cg)
	}
	s.cgroups = nil
	return took, killed, err
}

// limitCPU puts pid (all its threads) into a new cgroup name limited to
// quota CPUs and returns the cgroup's directory. It uses the cgroup v2
// hierarchy when /sys/fs/cgroup is one (cpu.max), else v1's cpu controller
// (cpu.cfs_quota_us); both need root.
func limitCPU(name string, pid int, quota float64) (string, error) {
	const period = 100_000 // µs
	us := strconv.Itoa(int(quota * period))
	dir := filepath.Join("/sys/fs/cgroup/cpu", name)
	files := [][2]string{{"cpu.cfs_period_us", strconv.Itoa(period)}, {"cpu.cfs_quota_us", us}}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dir = filepath.Join("/sys/fs/cgroup", name)
		files = [][2]string{{"cpu.max", us + " " + strconv.Itoa(period)}}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("create cgroup %s for a CPU quota (the scale phase needs root and the cpu controller): %w", dir, err)
	}
	for _, f := range append(files, [2]string{"cgroup.procs", strconv.Itoa(pid)}) {
		if err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0o644); err != nil {
			_ = os.Remove(dir)
			return "", fmt.Errorf("cgroup %s: write %s: %w", dir, f[0], err)
		}
	}
	return dir, nil
}

// commands returns the processes of a run of c: one, or for a scale
// contender one per instance on the same file, each with its own
// --instance-id.
func (b *bench) commands(ctx context.Context, c *contender, l launch) ([]*exec.Cmd, error) {
	cmd, err := b.command(ctx, c, l)
	if err != nil || c.instances <= 1 {
		return []*exec.Cmd{cmd}, err
	}
	cmds := make([]*exec.Cmd, 0, c.instances)
	for i := range c.instances {
		x := exec.CommandContext(ctx, cmd.Path, slices.Concat(cmd.Args[1:], []string{"--instance-id", fmt.Sprintf("%s-%d", c.name, i+1)})...)
		x.Env = cmd.Env
		cmds = append(cmds, x)
	}
	return cmds, nil
}

// scaleSection is the report's table of the scale phase: per instance
// count, the catch-up rate and its ratio to one instance's, the CPU the
// instances used (at most their quota), and the brokers' CPU over the run,
// in cores: where the rate stops growing while the brokers' cores do not
// grow either, the brokers (or the machine) are the limit.
func scaleSection(rows []*summaryRow, most, tasks int, quota float64) string {
	var one float64
	var lines []string
	for n := 1; n <= most; n++ {
		i := slices.IndexFunc(rows, func(r *summaryRow) bool { return r.name == scaleName(n) })
		if i < 0 {
			continue
		}
		r := rows[i]
		if n == 1 {
			one = r.mbps
		}
		lines = append(lines, fmt.Sprintf("| %d | %s | %s | %s | %s | %s | %s |", n, cell(r.wall, 1), cell(r.mbps, 1),
			cell(r.mbps/one, 2), cell(r.cpu/r.wall, 2), cell(float64(n)*quota, 2), cell(r.brokers/r.wall, 2)))
	}
	if len(lines) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nScale: mm2go instances on one file, `tasks.max = %d`, each in a cgroup of %.2f CPU; the brokers unlimited.\n\n", tasks, quota)
	b.WriteString("| instances | wall s | MB/s | vs 1 instance | mm2go cores used | cores allowed | brokers' cores |\n|--:|--:|--:|--:|--:|--:|--:|\n")
	b.WriteString(strings.Join(lines, "\n") + "\n")
	return b.String()
}
