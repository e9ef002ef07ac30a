package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNotify sends sd_notify messages to unixgram sockets, as systemd's
// NOTIFY_SOCKET receives them, and checks what arrives.
func TestNotify(t *testing.T) {
	tests := []struct {
		name     string
		abstract bool
		states   []string
		want     string
	}{
		{"ready", false, []string{notifyReady}, "READY=1"},
		{"stopping", false, []string{notifyStopping}, "STOPPING=1"},
		{"reloading with a status, one per line", false, []string{notifyReloading, "STATUS=reloading"}, "RELOADING=1\nSTATUS=reloading"},
		{"abstract namespace", true, []string{notifyReady}, "READY=1"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			socket := filepath.Join(t.TempDir(), "notify")
			if tt.abstract {
				socket = fmt.Sprintf("@mm2go-test-%d-%d", os.Getpid(), i)
			}
			conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: socket, Net: "unixgram"})
			require.NoError(t, err)
			defer conn.Close()

			require.NoError(t, newNotifier(socket).notify(tt.states...))

			require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
			buf := make([]byte, 4096)
			n, err := conn.Read(buf)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(buf[:n]))
		})
	}
}

// TestNotifyWithoutSocket checks the cases that send nothing or fail: no
// NOTIFY_SOCKET is not an error, an unreachable or unsupported one is.
func TestNotifyWithoutSocket(t *testing.T) {
	tests := []struct {
		name    string
		n       *notifier
		wantErr string
	}{
		{"nil notifier", nil, ""},
		{"no socket", newNotifier(""), ""},
		{"missing socket file", newNotifier(filepath.Join(t.TempDir(), "none")), "no such file or directory"},
		{"vsock", newNotifier("vsock:2:1234"), "vsock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.n.notify(notifyReady)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			require.ErrorContains(t, err, "notify service manager at ")
		})
	}
}
