package config

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Socket buffers (receive.buffer.bytes, send.buffer.bytes).
//
// Kafka's Java clients set SO_RCVBUF and SO_SNDBUF on every connection
// (consumers 64 KiB and 128 KiB by default), which turns off the kernel's
// buffer autotuning: a connection then carries at most one buffer per round
// trip, 64 KiB per 80 ms is 0.8 MB/s. mm2go leaves both to the kernel unless
// the file sets them, which is what a far-away source needs; a value in the
// file is honoured as the Java client does (-1: the kernel's default).

// socketBuffer reads a socket buffer size: -1 (the kernel's) or 0..2^31-1
// bytes, as Kafka's clients accept them. It returns -1 on error.
func (b *clientBuilder) socketBuffer(e entry) int {
	n, ok := b.integer(e, -1, 1<<31-1, "-1 (the operating system's default) or a size in bytes")
	if !ok {
		return -1
	}
	return int(n)
}

// dialer sets how the client connects: with franz-go's own dialer (TLS from
// the security step) unless a socket buffer size is set, which needs a
// dialer of mm2go's that sets it before the connection is made.
func (b *clientBuilder) dialer() {
	tlsCfg := b.c.tlsConfig
	if b.recvBuf < 0 && b.sendBuf < 0 {
		if tlsCfg != nil {
			b.opts = append(b.opts, kgo.DialTLSConfig(tlsCfg))
		}
		return
	}
	b.opts = append(b.opts, kgo.Dialer(socketDialer(b.dialTimeout, b.recvBuf, b.sendBuf, tlsCfg)))
}

// kgoDefaultDialTimeout is franz-go's DialTimeout default, which a dialer
// of our own must apply itself.
const kgoDefaultDialTimeout = 10 * time.Second

// socketDialer returns a dial function whose sockets get the receive and
// send buffer sizes (each unless negative) before they connect, so that
// TCP's window scale is chosen for them, and that speaks TLS when tlsCfg is
// set (the server name from the address when the config has none, as
// franz-go's dialer does).
func socketDialer(timeout time.Duration, recv, send int, tlsCfg *tls.Config) func(context.Context, string, string) (net.Conn, error) {
	if timeout <= 0 {
		timeout = kgoDefaultDialTimeout
	}
	nd := &net.Dialer{
		Timeout: timeout,
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				if recv >= 0 {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, recv)
				}
				if send >= 0 && serr == nil {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, send)
				}
			})
			if err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("set socket buffer sizes (receive.buffer.bytes %d, send.buffer.bytes %d): %w", recv, send, serr)
			}
			return nil
		},
	}
	if tlsCfg == nil {
		return nd.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c := tlsCfg.Clone()
		if c.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, fmt.Errorf("split host:port %q for TLS: %w", addr, err)
			}
			c.ServerName = host
		}
		return (&tls.Dialer{NetDialer: nd, Config: c}).DialContext(ctx, network, addr)
	}
}
