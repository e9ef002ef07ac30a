package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/mm2go/mm2go/internal/ktest"
)

// TestValidate runs `mm2go validate` against two kfake clusters: the
// effective configuration with secrets masked, and with --connect the
// topics each enabled flow would replicate, their remote names and
// partition counts, and the exit codes for an unreachable cluster and a bad
// file.
func TestValidate(t *testing.T) {
	src := ktest.Fake(t, 1, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "admin", "pw-src-4242"))
	dst := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srcCl, err := kgo.NewClient(kgo.SeedBrokers(src.ListenAddrs()...),
		kgo.SASL(scram.Auth{User: "admin", Pass: "pw-src-4242"}.AsSha512Mechanism()))
	require.NoError(t, err)
	t.Cleanup(srcCl.Close)
	dstCl, err := kgo.NewClient(kgo.SeedBrokers(dst.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(dstCl.Close)
	for topic, parts := range map[string]int32{"orders": 3, "payments": 1, "audit": 2, "x.internal": 1} {
		_, err := kadm.NewClient(srcCl).CreateTopic(ctx, parts, 1, nil, topic)
		require.NoError(t, err)
	}
	_, err = kadm.NewClient(dstCl).CreateTopic(ctx, 2, 1, nil, "A.orders")
	require.NoError(t, err)

	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
		return path
	}
	base := []string{
		"clusters = A, B",
		"A.bootstrap.servers = " + src.ListenAddrs()[0],
		"A.security.protocol = SASL_PLAINTEXT",
		"A.sasl.mechanism = SCRAM-SHA-512",
		`A.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="pw-src-4242";`,
		"A->B.enabled = true",
		"A->B.topics = orders, payments, x.*",
	}
	good := write("good.properties", append(base, "B.bootstrap.servers = "+dst.ListenAddrs()[0])...)
	down := write("down.properties", append(base, "B.bootstrap.servers = "+closedAddr(t))...)
	bad := write("bad.properties", "A->B.enabled = true")

	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		stdout     []string // regexps
		stderr     []string // regexps
		notStdout  []string
		notPresent string // in neither output
	}{
		{
			name:       "no connect",
			args:       []string{"-c", good},
			code:       exitOK,
			stdout:     []string{`sasl\.jaas\.config = <secret>`, `flow A->B`},
			notStdout:  []string{`replicates`},
			notPresent: "pw-src-4242",
		},
		{
			name: "connect",
			args: []string{"--connect", "-c", good},
			code: exitOK,
			stdout: []string{
				`(?m)^flow A->B replicates 2 topic\(s\), 4 partitions, from A to B$`,
				`(?m)^  TOPIC +PARTITIONS +REMOTE TOPIC +ON B$`,
				`(?m)^  orders +3 +A\.orders +exists, 2 partitions \(grown to 3 when mm2go starts\)$`,
				`(?m)^  payments +1 +A\.payments +missing: created when mm2go starts$`,
			},
			notStdout:  []string{`audit`, `x\.internal`},
			notPresent: "pw-src-4242",
		},
		{
			name: "unreachable target",
			args: []string{"--connect", "-c", down},
			code: exitFailure,
			stderr: []string{
				`(?m)^mm2go validate: flow A->B: cluster B \(127\.0\.0\.1:\d+\): unreachable: connection refused`,
				`1 of 1 enabled flows could not connect`,
			},
			notStdout:  []string{`replicates`},
			notPresent: "pw-src-4242",
		},
		{name: "bad file", args: []string{"--connect", "-c", bad}, code: exitUsage, stderr: []string{`invalid configuration`}},
		{name: "no file", args: []string{"--connect"}, code: exitUsage, stderr: []string{`-c FILE is required`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"validate"}, tc.args...), &stdout, &stderr)
			require.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			for _, re := range tc.stdout {
				require.Regexp(t, re, stdout.String())
			}
			for _, re := range tc.stderr {
				require.Regexp(t, re, stderr.String())
			}
			for _, re := range tc.notStdout {
				require.NotRegexp(t, re, stdout.String())
			}
			if tc.notPresent != "" {
				require.NotContains(t, stdout.String()+stderr.String(), tc.notPresent)
			}
		})
	}
}
