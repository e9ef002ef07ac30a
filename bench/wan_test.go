package main

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// dialFromNamespace connects to addr from inside the WAN namespace: the
// socket is created on a thread that entered it.
func dialFromNamespace(t *testing.T, addr string) net.Conn {
	t.Helper()
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread stays in the namespace and ends with the goroutine.
		runtime.LockOSThread()
		f, err := os.Open("/var/run/netns/" + wanNS)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		ch <- result{c, err}
	}()
	r := <-ch
	require.NoError(t, r.err)
	t.Cleanup(func() { _ = r.c.Close() })
	return r.c
}

// echo serves one echo listener on addr in the root namespace.
func echo(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// pingPong returns the shortest of n round trips of one byte over c.
func pingPong(t *testing.T, c net.Conn, n int) time.Duration {
	t.Helper()
	best := time.Hour
	b := []byte{1}
	for range n {
		t0 := time.Now()
		_, err := c.Write(b)
		require.NoError(t, err)
		_, err = io.ReadFull(c, b)
		require.NoError(t, err)
		best = min(best, time.Since(t0))
	}
	return best
}

// TestWANLink: from the namespace, the source's address answers after the
// round-trip time the link is set to, the target's at once; a bulk transfer
// arrives whole. Needs root (it is skipped otherwise).
func TestWANLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and TUN devices")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no TUN device on this machine: %v", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("no ip command (iproute2): %v", err)
	}
	ctx := context.Background()
	w, err := openWAN(ctx, t.Logf)
	require.NoError(t, err)
	defer w.close()
	src := dialFromNamespace(t, echo(t, wanSourceAddr+":0"))
	dst := dialFromNamespace(t, echo(t, wanTargetAddr+":0"))

	for _, rtt := range []time.Duration{0, 40 * time.Millisecond} {
		w.setRTT(rtt)
		got := pingPong(t, src, 5)
		require.GreaterOrEqual(t, got, rtt, "source round trip at %s", rtt)
		require.Less(t, got, rtt+20*time.Millisecond, "source round trip at %s", rtt)
		require.Less(t, pingPong(t, dst, 5), 20*time.Millisecond, "the target is not delayed (%s set)", rtt)
	}

	// 8 MiB through the delayed path, echoed back whole and in order.
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	go func() { _, _ = src.Write(data) }()
	back := make([]byte, len(data))
	require.NoError(t, src.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err = io.ReadFull(src, back)
	require.NoError(t, err)
	require.Equal(t, data, back)
}
