package main

import (
	"fmt"
	"net"
	"strings"
)

// Service manager states, as sd_notify(3) defines them. A message may carry
// several, one per line.
const (
	// notifyReady tells systemd that start-up finished (Type=notify units
	// stay "activating" until it arrives).
	notifyReady = "READY=1"
	// notifyStopping tells systemd that the service began to shut down.
	notifyStopping = "STOPPING=1"
	// notifyReloading tells systemd that the service reloads its
	// configuration; send notifyReady when the reload is done.
	notifyReloading = "RELOADING=1"
)

// notifier sends state changes to the service manager's notification socket,
// the protocol of sd_notify(3), without linking libsystemd: one datagram per
// message on the unixgram socket named by $NOTIFY_SOCKET. A path starting
// with "@" names a socket in the abstract namespace.
//
// The zero value, and a notifier created without a socket (mm2go not run by
// systemd, or a unit with Type=simple), sends nothing.
type notifier struct {
	socket string
}

// newNotifier returns a notifier for socket, the value of $NOTIFY_SOCKET.
func newNotifier(socket string) *notifier {
	return &notifier{socket: socket}
}

// notify sends the states as one message. It returns nil without sending
// anything when there is no socket; otherwise an error when the socket is
// unreachable or not a unixgram socket. The caller logs the error and goes
// on: a failed notification must not stop replication.
func (n *notifier) notify(states ...string) error {
	if n == nil || n.socket == "" || len(states) == 0 {
		return nil
	}
	if strings.HasPrefix(n.socket, "vsock:") {
		// AF_VSOCK: a service manager outside a virtual machine.
		return fmt.Errorf("notify service manager at %s: vsock sockets are not supported", n.socket)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.socket, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify service manager at %s: %w", n.socket, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(states, "\n"))); err != nil {
		return fmt.Errorf("notify service manager at %s: %w", n.socket, err)
	}
	return nil
}
