package config

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

type dialFn = func(context.Context, string, string) (net.Conn, error)

// socketBuffers returns the SO_RCVBUF and SO_SNDBUF of a TCP connection
// (Linux reports twice what was set: its bookkeeping share).
func socketBuffers(t *testing.T, conn net.Conn) (recv, send int) {
	t.Helper()
	if tc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = tc.NetConn()
	}
	rc, err := conn.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	require.NoError(t, rc.Control(func(fd uintptr) {
		recv, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		require.NoError(t, err)
		send, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
		require.NoError(t, err)
	}))
	return recv, send
}

// TestSocketBuffers: receive.buffer.bytes and send.buffer.bytes reach the
// sockets of the clients they are set for (through a dialer of mm2go's,
// with TLS when the cluster uses it); unset, franz-go's dialer leaves the
// kernel's autotuning on; a bad value names its key.
func TestSocketBuffers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()

	c, _ := mustLoad(t, twoClusters+`
a.consumer.receive.buffer.bytes = 1048576
a.consumer.send.buffer.bytes = 131072
a.admin.receive.buffer.bytes = -1
`)
	f := c.Flow("a", "b")
	dial, ok := newKgo(t, f.Client(RoleSourceConsumer)).OptValue(kgo.Dialer).(dialFn)
	require.True(t, ok)
	require.NotNil(t, dial)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := dial(ctx, "tcp", ln.Addr().String())
	require.NoError(t, err)
	recv, send := socketBuffers(t, conn)
	_ = conn.Close()
	require.Equal(t, 2*1048576, recv)
	require.Equal(t, 2*131072, send)

	// -1 or unset: the kernel's buffers (Linux starts a socket at
	// net.ipv4.tcp_rmem's default and grows it as the connection needs).
	for _, role := range []Role{RoleSourceAdmin, RoleSourceProducer, RoleTargetConsumer} {
		dial := newKgo(t, f.Client(role)).OptValue(kgo.Dialer).(dialFn)
		conn, err := dial(ctx, "tcp", ln.Addr().String())
		require.NoError(t, err)
		recv, _ := socketBuffers(t, conn)
		_ = conn.Close()
		require.NotEqual(t, 2*1048576, recv, role)
	}

	_, _, err = load(t, twoClusters+"a.consumer.receive.buffer.bytes = -2\n", nil, t.TempDir())
	require.ErrorContains(t, err, "a.consumer.receive.buffer.bytes: out of range")
	_, _, err = load(t, twoClusters+"b.producer.send.buffer.bytes = lots\n", nil, t.TempDir())
	require.ErrorContains(t, err, "b.producer.send.buffer.bytes: not an integer")
}

// TestSocketBuffersTLS: with a socket buffer size set, mm2go's dialer speaks
// TLS as franz-go's would (mutual TLS, the server name from the address).
func TestSocketBuffersTLS(t *testing.T) {
	p := newTestPKI(t, nil, []net.IP{net.ParseIP("127.0.0.1")})
	addr := tlsServer(t, p)
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{
		"ca.pem":     p.caPEM,
		"client.pem": append(p.clientKeyPEM(t, ""), p.clientCertPEM...),
	})
	c, _, err := load(t, "clusters = a, b\na.bootstrap.servers = "+addr+"\nb.bootstrap.servers = localhost:9092\na->b.enabled = true\n"+
		"a.security.protocol = SSL\na.ssl.truststore.type = PEM\na.ssl.keystore.type = PEM\n"+
		"a.ssl.truststore.location = ca.pem\na.ssl.keystore.location = client.pem\n"+
		"a.consumer.receive.buffer.bytes = 4194304\na.admin.send.buffer.bytes = 65536\n", nil, dir)
	require.NoError(t, err)
	cl := c.Flow("a", "b").Client(RoleSourceConsumer)
	k := newKgo(t, cl)
	require.Nil(t, k.OptValue(kgo.DialTLSConfig), "TLS is done by mm2go's dialer")
	dial := k.OptValue(kgo.Dialer).(dialFn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := dial(ctx, "tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	// TLS 1.3 reports a refused client certificate at the first read: the
	// server closes after its handshake, so a clean EOF is success.
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	require.ErrorContains(t, err, "EOF")
	recv, _ := socketBuffers(t, conn)
	require.GreaterOrEqual(t, recv, 4194304)

	// Cluster-level socket keys reach no client, as in MM2.

	// The hostname check still applies: the certificate is for 127.0.0.1.
	dial = newKgo(t, c.Flow("a", "b").Client(RoleSourceAdmin)).OptValue(kgo.Dialer).(dialFn)
	_, err = dial(ctx, "tcp", "localhost:"+addr[len("127.0.0.1:"):])
	require.ErrorContains(t, err, "certificate")
}
