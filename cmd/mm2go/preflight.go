package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jcmturner/gokrb5/v8/krberror"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/mm2go/mm2go/config"
)

// preflightTimeout bounds the connectivity check of one client: 15s, which
// covers kgo's 10s dial timeout plus a SASL exchange.
const preflightTimeout = 15 * time.Second

// preflightRetries is how often a check's request is retried after a
// retryable failure (kgo's default is 20), with kgo's backoff of 250ms and
// more in between.
const preflightRetries = 3

// clusterError is a failed connectivity check of one cluster, worded for
// people: "cluster b (10.0.0.1:9092): SASL authentication failed: ...".
// It never holds a secret: kgo's and the broker's messages name no
// credentials.
type clusterError struct {
	// Cluster is the alias.
	Cluster string
	// Bootstrap is the bootstrap.servers list of the failing clients.
	Bootstrap []string
	// Problem says what went wrong and what to check.
	Problem string
	// Clients lists the client roles (MM2's client.id role part) that failed
	// when others with different settings on the same cluster succeeded;
	// empty when every checked client of the cluster failed this way.
	Clients []string
	// Err is the underlying error.
	Err error
}

func (e *clusterError) Error() string {
	msg := fmt.Sprintf("cluster %s (%s): %s", e.Cluster, strings.Join(e.Bootstrap, ","), e.Problem)
	if len(e.Clients) > 0 {
		msg += fmt.Sprintf(" [only the %s client settings]", strings.Join(e.Clients, ", "))
	}
	return fmt.Sprintf("%s: %v", msg, e.Err)
}

func (e *clusterError) Unwrap() error { return e.Err }

// preflightRoles returns the client roles a run of f uses: all but the
// source producer when f replicates (that one only with offset syncs on the
// source), and the target producer and admin for a heartbeat-only pair.
func preflightRoles(f *config.Flow) []config.Role {
	if !f.Enabled {
		return []config.Role{config.RoleTargetProducer, config.RoleTargetAdmin}
	}
	roles := []config.Role{config.RoleSourceConsumer, config.RoleSourceAdmin,
		config.RoleTargetConsumer, config.RoleTargetProducer, config.RoleTargetAdmin}
	if f.EmitOffsetSyncsEnabled && f.OffsetSyncsTopicLocation == config.LocationSource {
		roles = append(roles, config.RoleSourceProducer)
	}
	return roles
}

// preflight checks, before a flow starts its workers, that every client the
// flow uses can reach its cluster and log in: one Metadata request for no
// topics per client, which needs a working connection, TLS handshake and
// SASL exchange but no ACL. Each check takes at most preflightTimeout; the
// clients run concurrently and are closed before preflight returns.
//
// The error is a preflightError with one *clusterError per cluster and
// problem, or ctx's error. Without this check a wrong password or CA shows
// up only as failures of later requests, worded by whichever worker hit
// them first.
func preflight(ctx context.Context, f *config.Flow) error {
	roles := preflightRoles(f)
	errs := make([]error, len(roles))
	var wg sync.WaitGroup
	for i, r := range roles {
		wg.Go(func() { errs[i] = checkClient(ctx, f.Client(r), preflightTimeout) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}

	type key struct{ cluster, bootstrap, problem string }
	failed := make(map[key]*clusterError)
	checked := make(map[string]int) // roles checked per cluster
	var order []key
	for i, r := range roles {
		checked[f.Client(r).Cluster]++
		var ce *clusterError
		if !errors.As(errs[i], &ce) {
			continue
		}
		k := key{ce.Cluster, strings.Join(ce.Bootstrap, ","), ce.Problem}
		if prev, ok := failed[k]; ok {
			prev.Clients = append(prev.Clients, ce.Clients...)
			continue
		}
		failed[k] = ce
		order = append(order, k)
	}
	if len(order) == 0 {
		return nil
	}
	var out preflightError
	for _, k := range order {
		ce := failed[k]
		if len(ce.Clients) == checked[ce.Cluster] {
			ce.Clients = nil // every client of the cluster failed the same way
		}
		sort.Strings(ce.Clients)
		out = append(out, ce)
	}
	return out
}

// preflightError is one or more failed cluster checks, printed on one line
// (a log field) separated by "; ".
type preflightError []*clusterError

func (e preflightError) Error() string {
	msgs := make([]string, len(e))
	for i, ce := range e {
		msgs[i] = ce.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap returns the cluster errors, for errors.As and errors.Is.
func (e preflightError) Unwrap() []error {
	out := make([]error, len(e))
	for i, ce := range e {
		out[i] = ce
	}
	return out
}

// ping sends one Metadata request for no topics, which needs a working
// connection, TLS handshake and SASL exchange but no ACL. It always asks a
// broker: kadm's metadata calls may answer from the client's cache.
func ping(ctx context.Context, cl *kgo.Client) error {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // none; nil would ask for all topics
	_, err := cl.Request(ctx, req)
	return err
}

// checkClient pings c's cluster with a client of c's settings, waiting at
// most timeout. It returns nil or a *clusterError.
func checkClient(ctx context.Context, c *config.Client, timeout time.Duration) error {
	fail := func(err error) error {
		return &clusterError{Cluster: c.Cluster, Bootstrap: c.BootstrapServers, Problem: describeConnectError(err),
			Clients: []string{c.Role.ClientRole()}, Err: err}
	}
	if len(c.BootstrapServers) == 0 {
		return fail(errors.New("bootstrap.servers is not set"))
	}
	// No logger: kgo's own lines about the same failure would only repeat
	// the error this check returns.
	// Few retries: a broker that closes every connection (a TLS or SASL
	// mismatch) then fails with its real error rather than the deadline.
	cl, err := kgo.NewClient(append(c.Opts(), kgo.RequestRetries(preflightRetries))...)
	if err != nil {
		return fail(fmt.Errorf("create client: %w", err))
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = ping(rctx, cl)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		// kgo reports only the deadline; tell a silent host from a
		// listener that accepts connections but does not answer.
		err = fmt.Errorf("no answer within %s: %w", timeout, err)
		if tcpReachable(c.BootstrapServers) {
			return &clusterError{Cluster: c.Cluster, Bootstrap: c.BootstrapServers, Clients: []string{c.Role.ClientRole()}, Err: err,
				Problem: "connected, but no Kafka answer: check security.protocol (a TLS client on a plaintext listener waits) and the port"}
		}
	}
	return fail(err)
}

// tcpReachable reports whether a TCP connection to one of addrs opens
// within 3s.
func tcpReachable(addrs []string) bool {
	for _, a := range addrs {
		conn, err := net.DialTimeout("tcp", a, 3*time.Second)
		if err == nil {
			_ = conn.Close()
			return true
		}
	}
	return false
}

// isKerberosError reports whether err came from a Kerberos exchange
// (gokrb5's errors, whose type does not always survive the client's
// wrapping: their text says so too).
func isKerberosError(err error) bool {
	var v krberror.Krberror
	var p *krberror.Krberror
	if errors.As(err, &v) || errors.As(err, &p) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "KDC_Error") || strings.Contains(msg, "KRB Error") || strings.Contains(msg, "Kerberos")
}

// describeConnectError says in words what a failed first request to a
// cluster means and what to check. It never quotes configuration values.
func describeConnectError(err error) string {
	var (
		unknownCA   x509.UnknownAuthorityError
		hostErr     x509.HostnameError
		invalidCert x509.CertificateInvalidError
		verifyErr   *tls.CertificateVerificationError
		recordErr   tls.RecordHeaderError
		alertErr    tls.AlertError
		dnsErr      *net.DNSError
		firstEOF    *kgo.ErrFirstReadEOF
	)
	switch {
	case isKerberosError(err):
		return "Kerberos (GSSAPI) login failed: check the keytab and principal in sasl.jaas.config, that the KDC of " +
			"krb5.conf (KRB5_CONFIG) knows the principal, and the broker's service principal (sasl.kerberos.service.name/<broker host>)"
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return "SASL authentication failed: check the user name and password in sasl.jaas.config, " +
			"and that the user has credentials for sasl.mechanism on this cluster"
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return "the listener does not accept this sasl.mechanism: check sasl.mechanism and the broker's sasl.enabled.mechanisms"
	case errors.Is(err, kerr.IllegalSaslState):
		return "the broker rejected the SASL handshake: check security.protocol and sasl.mechanism"
	case errors.As(err, &unknownCA):
		return "TLS: the broker's certificate is not signed by a trusted CA: check ssl.truststore.location " +
			"(or ssl.truststore.certificates; unset means the system's CAs)"
	case errors.As(err, &hostErr):
		return "TLS: the broker's certificate is not valid for the address it was reached at: check bootstrap.servers " +
			"and the broker's advertised.listeners (ssl.endpoint.identification.algorithm= skips the host name check)"
	case errors.As(err, &invalidCert):
		return "TLS: the broker's certificate is not valid (expired, not yet valid or not for server use)"
	case errors.As(err, &verifyErr):
		return "TLS: the broker's certificate could not be verified"
	case errors.As(err, &recordErr):
		return "TLS: the listener does not speak TLS: check security.protocol"
	case errors.As(err, &alertErr):
		return "TLS: the broker refused the handshake: it may require a client certificate (ssl.keystore.*) " +
			"or protocols and ciphers this client does not offer"
	case errors.As(err, &firstEOF):
		return "the broker closed the connection at once: check security.protocol (TLS or SASL expected but not used?) " +
			"and, with SASL, the credentials"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "unreachable: connection refused (is the broker running, and is this its listener's port?)"
	case errors.As(err, &dnsErr):
		return "unreachable: the host name does not resolve"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable: no answer (host down, wrong address, or a firewall?)"
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return "the broker closed the connection: check security.protocol and, with SASL, the credentials"
	}
	return "connection check failed"
}
