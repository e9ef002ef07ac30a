package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The WAN phase: the replicator reaches the source across a link with an
// added round-trip time, as in the deployment the project recommends (the
// replicator next to the target, the source in another region).
//
// This machine's kernel has no netem qdisc, so the link is a delay line in
// this process: the replicator runs in a network namespace of its own
// (wanNS) whose only way out is a TUN device; a second TUN device in the
// root namespace carries the brokers' side. This process reads every packet
// from one device and writes it into the other, packets to or from the
// source's address after half the round-trip time, the target's at once.
// Both kernels' TCP stacks see the real round trip: slow start, windows and
// socket buffers behave as over a long link. The link adds no loss and no
// bandwidth limit.
//
// The brokers get a second listener (WAN) on the root side's addresses,
// which only the namespace can reach; the benchmark's own producer and
// consumer keep using loopback, so the latency measured is the replicator's.

const (
	wanNS         = "mm2go-bench-near"
	wanNearAddr   = "10.77.0.1"
	wanSourceAddr = "10.77.0.2"
	wanTargetAddr = "10.77.0.3"
	wanRootDev    = "mbwan0"
	wanNearDev    = "mbwan1"
	// wanPortOffset: a broker's WAN listener is on its port + this.
	wanPortOffset = 3
	// wanMTU: large packets keep the delay line's packet rate low (TCP
	// segments up to 64 KiB, as on loopback).
	wanMTU = 65000
	// wanQueue is the devices' txqueuelen: the packets the kernel keeps
	// for the delay line to read. With the default 500 (32 MB of 64 KiB
	// packets), an experimental mm2go with four Fetch responses on their
	// way at once had the kernel drop 64, 111 and 146 packets in three
	// runs at 80 ms, when this process read late on the busy 2-core
	// machine; with 20000, none in the 64 WAN runs after (2026-12-05). A
	// drop costs TCP a retransmission, which the lossless link this models
	// does not have.
	wanQueue = 20000
	// wanWmem is the root namespace's net.ipv4.tcp_wmem while the link
	// exists: a sender's socket buffer bounds the bytes in flight, and a
	// 4 MiB maximum carries at most 50 MB/s over 80 ms. Restored at close.
	wanWmem = "4096 16384 33554432"
)

// wanListenerProps are the broker properties that add the WAN listener to a
// single-node test-bed cluster on port (controller on port+1000), and let
// the kernel size its sockets' buffers (Kafka's 100 KiB send buffer carries
// 1.25 MB/s per connection over 80 ms; a cross-region deployment sets -1).
func wanListenerProps(port int, addr string) string {
	wan := fmt.Sprintf("WAN://%s:%d", addr, port+wanPortOffset)
	return strings.Join([]string{
		fmt.Sprintf("listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d,%s", port, port+1000, wan),
		fmt.Sprintf("advertised.listeners=PLAINTEXT://127.0.0.1:%d,%s", port, wan),
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,WAN:PLAINTEXT",
		"socket.send.buffer.bytes=-1",
		"socket.receive.buffer.bytes=-1",
	}, `\n`)
}

// wanLink is the delay line between the namespace and the root namespace.
type wanLink struct {
	root, near *os.File
	oneWay     atomic.Int64 // delay of source packets each way, nanoseconds
	fromSource atomic.Int64 // bytes of the IP packets the source sent across
	wg         sync.WaitGroup
	sysctl     sysctls // tcp_wmem, restored at close
	logf       func(string, ...any)
}

// openTun creates the TUN device name (IP packets, no packet information
// header), non-blocking so that Close ends a pending Read.
func openTun(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("create TUN device %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "tun:"+name), nil
}

// ip runs the ip command.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// openWAN creates the namespace, the two devices and their addresses and
// routes, and starts the delay line with no delay. It needs root.
func openWAN(ctx context.Context, logf func(string, ...any)) (_ *wanLink, err error) {
	_ = ip(ctx, "netns", "del", wanNS) // left by a run that was killed
	if err := ip(ctx, "netns", "add", wanNS); err != nil {
		return nil, fmt.Errorf("the WAN phase needs root (network namespaces and TUN devices): %w", err)
	}
	w := &wanLink{logf: logf}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	if w.root, err = openTun(wanRootDev); err != nil {
		return nil, err
	}
	if w.near, err = openTun(wanNearDev); err != nil {
		return nil, err
	}
	mtu, qlen := strconv.Itoa(wanMTU), strconv.Itoa(wanQueue)
	for _, args := range [][]string{
		{"link", "set", wanNearDev, "netns", wanNS},
		{"addr", "add", wanSourceAddr + "/32", "dev", wanRootDev},
		{"addr", "add", wanTargetAddr + "/32", "dev", wanRootDev},
		{"link", "set", wanRootDev, "mtu", mtu, "txqueuelen", qlen, "up"},
		{"route", "add", wanNearAddr + "/32", "dev", wanRootDev},
		{"-n", wanNS, "link", "set", "lo", "up"},
		{"-n", wanNS, "addr", "add", wanNearAddr + "/32", "dev", wanNearDev},
		{"-n", wanNS, "link", "set", wanNearDev, "mtu", mtu, "txqueuelen", qlen, "up"},
		{"-n", wanNS, "route", "add", "10.77.0.0/24", "dev", wanNearDev},
	} {
		if err := ip(ctx, args...); err != nil {
			return nil, err
		}
	}
	if err := w.sysctl.set("net.ipv4.tcp_wmem", wanWmem); err != nil {
		return nil, err
	}
	src := net.ParseIP(wanSourceAddr).To4()
	const srcAt, dstAt = 12, 16 // offsets of the addresses in an IPv4 header
	w.wg.Go(func() { w.pump(w.near, w.root, func(p []byte) bool { return ipv4At(p, dstAt).Equal(src) }, nil) })
	w.wg.Go(func() {
		w.pump(w.root, w.near, func(p []byte) bool { return ipv4At(p, srcAt).Equal(src) }, &w.fromSource)
	})
	return w, nil
}

// ipv4At returns the address at off of an IPv4 packet's header, nil for
// anything else.
func ipv4At(p []byte, off int) net.IP {
	if len(p) < 20 || p[0]>>4 != 4 {
		return nil
	}
	return net.IP(p[off : off+4])
}

// setRTT sets the round-trip time the link adds between the namespace and
// the source: half of it each way.
func (w *wanLink) setRTT(rtt time.Duration) { w.oneWay.Store(int64(rtt / 2)) }

// pump moves packets from one device to the other until from is closed:
// those delayed reports true for wait the one-way delay in a queue (in
// order: the delay is the same for all), the others are written at once.
// The delayed packets' bytes are added to carried, if not nil.
func (w *wanLink) pump(from, to *os.File, delayed func([]byte) bool, carried *atomic.Int64) {
	type packet struct {
		b   []byte
		due time.Time
	}
	queue := make(chan packet, 1<<16)
	var writer sync.WaitGroup
	writer.Go(func() {
		for p := range queue {
			if d := time.Until(p.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := to.Write(p.b); err != nil && !errors.Is(err, os.ErrClosed) {
				w.logf("wan link: write: %v", err)
			}
		}
	})
	defer writer.Wait()
	defer close(queue)
	buf := make([]byte, 1<<16)
	for {
		n, err := from.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.logf("wan link: read: %v", err)
			}
			return
		}
		d := time.Duration(w.oneWay.Load())
		far := delayed(buf[:n])
		if far && carried != nil {
			carried.Add(int64(n))
		}
		if d <= 0 || !far {
			if _, err := to.Write(buf[:n]); err != nil && !errors.Is(err, os.ErrClosed) {
				w.logf("wan link: write: %v", err)
			}
			continue
		}
		queue <- packet{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(d)}
	}
}

// dropped returns the packets the two devices dropped so far (their
// tx_dropped: packets the kernel could not queue for the delay line, which
// reads too slowly; each is a loss TCP recovers from, often only after its
// retransmission timeout of 200 ms or more).
func (w *wanLink) dropped(ctx context.Context) (int64, error) {
	var sum int64
	for _, args := range [][]string{{"-s", "-j", "link", "show", "dev", wanRootDev}, {"-n", wanNS, "-s", "-j", "link", "show", "dev", wanNearDev}} {
		out, err := exec.CommandContext(ctx, "ip", args...).Output()
		if err != nil {
			return 0, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
		}
		var links []struct {
			Stats64 struct {
				TX struct {
					Dropped int64 `json:"dropped"`
				} `json:"tx"`
			} `json:"stats64"`
		}
		if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
			return 0, fmt.Errorf("ip %s: unexpected output %q", strings.Join(args, " "), out)
		}
		sum += links[0].Stats64.TX.Dropped
	}
	return sum, nil
}

// close stops the delay line, removes the namespace (and with it the
// devices) and restores tcp_wmem.
func (w *wanLink) close() {
	for _, f := range []*os.File{w.root, w.near} {
		if f != nil {
			_ = f.Close()
		}
	}
	w.wg.Wait()
	if err := ip(context.Background(), "netns", "del", wanNS); err != nil {
		w.logf("wan link: %v", err)
	}
	w.sysctl.restore(w.logf)
}

// inNamespace returns cmd run inside the namespace (ip netns exec execs it,
// so the process's pid stays the one the benchmark samples).
func inNamespace(ctx context.Context, cmd *exec.Cmd) *exec.Cmd {
	x := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", wanNS, cmd.Path}, cmd.Args[1:]...)...)
	x.Env = cmd.Env
	return x
}

// wanContenders returns, for every -wan-contenders name and every RTT, a
// copy of the contender that runs over the link, named NAME@RTT.
func (b *bench) wanContenders() ([]*contender, error) {
	var out []*contender
	for _, rtt := range b.o.wanRTTs {
		for _, name := range b.o.wanOnly {
			base := b.contender(name)
			if base == nil {
				return nil, fmt.Errorf("-wan-contenders: no contender %q", name)
			}
			c := *base
			c.name, c.wan, c.rtt, c.base = fmt.Sprintf("%s@%dms", name, rtt.Milliseconds()), true, rtt, name
			c.about = fmt.Sprintf("%s, the source %s away", base.name, rtt)
			out = append(out, &c)
		}
	}
	return out, nil
}

// wanPhase runs, at each RTT, every WAN contender's backlog copy, then its
// latency at the steady rate.
func (b *bench) wanPhase(ctx context.Context) error {
	cs, err := b.wanContenders()
	if err != nil {
		return err
	}
	b.reps = append(b.reps, cs...)
	for round := 1; round <= b.o.rounds; round++ {
		for _, rtt := range b.o.wanRTTs {
			b.wan.setRTT(rtt)
			b.logf("WAN link: %s added round trip to the source", rtt)
			for _, c := range cs {
				if c.rtt == rtt {
					b.record(b.overLink(ctx, func() runResult { return b.replicate(ctx, c, round, false) }))
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
			for _, c := range cs {
				if c.rtt == rtt {
					b.record(b.overLink(ctx, func() runResult { return b.latency(ctx, c, round, b.o.latLoads[0], false) }))
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	b.wan.setRTT(0)
	return nil
}

// overLink runs a WAN run and notes in its result the packets the delay
// line dropped meanwhile (a loss costs TCP a retransmission, the latency
// of a run with drops has stalls a lossless link would not have) and the
// bytes the source sent across, what a cross-region link is paid by.
func (b *bench) overLink(ctx context.Context, run func() runResult) runResult {
	before, err := b.wan.dropped(ctx)
	carried := b.wan.fromSource.Load()
	res := run()
	carried = b.wan.fromSource.Load() - carried
	copied := res.Bytes
	if res.RunBytes > 0 {
		copied = res.RunBytes
	}
	if copied > 0 {
		res.Note = strings.TrimSpace(res.Note + fmt.Sprintf(" link from the source %.1f MB, %.2f per MB copied", float64(carried)/1e6, float64(carried)/float64(copied)))
	}
	b.logf("WAN link: %s %s: the source sent %.1f MB across", res.Phase, res.Contender, float64(carried)/1e6)
	after, err2 := b.wan.dropped(ctx)
	switch {
	case err != nil || err2 != nil:
		b.logf("WAN link: drop counters: %v", errors.Join(err, err2))
	case after > before:
		res.Note = strings.TrimSpace(res.Note + fmt.Sprintf(" the delay line dropped %d packets", after-before))
		b.logf("WAN link: %s %s dropped %d packets", res.Phase, res.Contender, after-before)
	}
	return res
}

// wanRate is the catch-up rate of a WAN run in MB/s: of the whole backlog,
// or of what it copied before -wan-timeout.
func wanRate(r runResult) float64 {
	if r.Wall <= 0 || (!r.OK && r.Records == 0) {
		return math.NaN()
	}
	return float64(r.Bytes) / 1e6 / r.Wall.Seconds()
}

// wanAfterFirst is the rate of a whole WAN catch-up from its first record
// on, in MB/s: the transfer without the start-up (connections, the flow's
// round trips before its first Fetch, the first response's slow start),
// which weighs more the shorter the backlog's copy.
func wanAfterFirst(r runResult) float64 {
	if !r.OK || r.First <= 0 || r.Wall <= r.First {
		return math.NaN()
	}
	return float64(r.Bytes) / 1e6 / (r.Wall - r.First).Seconds()
}

// wanSection reports the WAN phase: per contender and RTT the catch-up rate
// (median over rounds), its ratio to the contender's own at the first RTT
// (0 ms added), its ratio to the best MM2's at the same RTT, the first
// record and the rate after it (and its ratio to the contender's own at the
// first RTT), and the latency at the steady rate.
func (b *bench) wanSection() string {
	type key struct {
		base string
		rtt  time.Duration
	}
	rates, p50, p99 := map[key][]float64{}, map[key][]float64{}, map[key][]float64{}
	firsts, after := map[key][]float64{}, map[key][]float64{}
	partial := map[key]bool{}
	mm2 := map[string]bool{} // bases that are Apache MM2
	var order []key
	for _, r := range b.results {
		c := b.contender(r.Contender)
		if c == nil || !c.wan {
			continue
		}
		k := key{c.base, c.rtt}
		mm2[c.base] = c.kind == kindMM2
		if _, ok := rates[k]; !ok {
			order = append(order, k)
			rates[k] = nil
		}
		switch r.Phase {
		case "wan":
			if x := wanRate(r); !math.IsNaN(x) {
				rates[k] = append(rates[k], x)
				partial[k] = partial[k] || !r.OK
			}
			if x := wanAfterFirst(r); !math.IsNaN(x) {
				firsts[k] = append(firsts[k], r.First.Seconds())
				after[k] = append(after[k], x)
			}
		case "latency":
			if r.OK {
				p50[k] = append(p50[k], ms(r.P50))
				p99[k] = append(p99[k], ms(r.P99))
			}
		}
	}
	bestMM2 := func(rtt time.Duration) float64 {
		best := math.NaN()
		for k, v := range rates {
			if k.rtt == rtt && mm2[k.base] && len(v) > 0 {
				if x := median(v); math.IsNaN(best) || x > best {
					best = x
				}
			}
		}
		return best
	}
	var s strings.Builder
	first := time.Duration(-1)
	if len(b.o.wanRTTs) > 0 {
		first = b.o.wanRTTs[0]
	}
	fmt.Fprintf(&s, "\nWAN phase: the replicator in a network namespace reaching the source over a delay line (TUN devices) that adds the round-trip time, "+
		"the target at once; backlog catch-up (the whole backlog, or the rate reached in -wan-timeout %s, marked *), then %s from a linger.ms=0 producer:\n\n",
		b.o.wanTimeout, loadName(b.o.latLoads[0]))
	fmt.Fprintf(&s, "| contender | added RTT ms | catch-up MB/s | of its own at %d ms | × best MM2 at this RTT | first record s | MB/s after it | of its own at %d ms | p50 ms | p99 ms | p99 − RTT ms |\n",
		first.Milliseconds(), first.Milliseconds())
	s.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, k := range order {
		rate := median(rates[k])
		own := median(rates[key{k.base, first}])
		mark := ""
		if partial[k] {
			mark = "*"
		}
		aft := median(after[k])
		fmt.Fprintf(&s, "| %s | %d | %s%s | %s | %s | %s | %s | %s | %s | %s | %s |\n", k.base, k.rtt.Milliseconds(), cell(rate, 1), mark,
			cell(rate/own, 2), cell(rate/bestMM2(k.rtt), 2), cell(median(firsts[k]), 2), cell(aft, 1),
			cell(aft/median(after[key{k.base, first}]), 2), cell(median(p50[k]), 1), cell(median(p99[k]), 1),
			cell(median(p99[k])-ms(k.rtt), 1))
	}
	if len(b.o.wanRTTs) > 1 {
		far := slices.Max(b.o.wanRTTs)
		k := key{nameMM2go, far}
		rate, own, best, tail := median(rates[k]), median(rates[key{nameMM2go, first}]), bestMM2(far), median(p99[k])
		fmt.Fprintf(&s, "\n| target (issue 15, `mm2go` at %d ms) | measured | met |\n|---|---|---|\n", far.Milliseconds())
		targetLine(&s, fmt.Sprintf("catch-up ≥ 90 %% of its own at %d ms", first.Milliseconds()), 100*rate/own, "%.0f %%", rate >= 0.9*own)
		targetLine(&s, "catch-up ≥ 3 × the best MM2's", rate/best, "%.2f×", rate >= 3*best)
		targetLine(&s, "p99 at the steady rate ≤ RTT + 50 ms", tail, "%.1f ms", tail <= ms(far)+50)
		if v := p99[key{nameMM2goOverlap, far}]; len(v) > 0 {
			tail := median(v)
			targetLine(&s, "p99 at the steady rate ≤ RTT + 50 ms, `"+nameMM2goOverlap+"`", tail, "%.1f ms", tail <= ms(far)+50)
		}
	}
	return s.String()
}
