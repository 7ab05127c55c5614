package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sink-io/sink/internal/testkit/testcerts"
)

// logRecorder is a slog handler that keeps the messages it receives and
// passes them on to wait.
type logRecorder struct {
	mu       sync.Mutex
	messages []string
	ch       chan string
}

func newLogRecorder() *logRecorder { return &logRecorder{ch: make(chan string, 1000)} }

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.messages = append(r.messages, rec.Message)
	r.mu.Unlock()
	select {
	case r.ch <- rec.Message:
	default:
	}
	return nil
}

// count returns how many messages start with prefix.
func (r *logRecorder) count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.messages {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

func (r *logRecorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.messages...)
}

// wait returns when a message starting with prefix is logged, failing the
// test after 10 seconds.
func (r *logRecorder) wait(t *testing.T, prefix string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m := <-r.ch:
			if strings.HasPrefix(m, prefix) {
				return
			}
		case <-timeout:
			t.Fatalf("no log message %q within 10s", prefix)
		}
	}
}

// replace writes data to path atomically (a temporary file, then a rename),
// as certificate managers do.
func replace(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	replace(t, to, b)
}

// handshake connects a TLS client over 127.0.0.1 to a server with
// serverCfg and returns the certificate the server presented and the
// server's handshake error (a refused client certificate fails there).
func handshake(t *testing.T, serverCfg, clientCfg *tls.Config) (*x509.Certificate, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serverErr := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			serverErr <- err
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		serverErr <- tls.Server(conn, serverCfg).Handshake()
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	conn := tls.Client(raw, clientCfg)
	var presented *x509.Certificate
	if conn.Handshake() == nil {
		presented = conn.ConnectionState().PeerCertificates[0]
	}
	return presented, <-serverErr
}

func TestServerTLSReloadsTheCertificate(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	first, second := ca.Server(t, "first"), ca.Server(t, "second")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	copyFile(t, first.CertFile, certFile)
	copyFile(t, first.KeyFile, keyFile)
	logs := newLogRecorder()
	st, err := NewServerTLS(ServerTLSConfig{CertFile: certFile, KeyFile: keyFile, CheckInterval: time.Nanosecond}, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
	serves := func(want testcerts.Pair) {
		t.Helper()
		got, err := handshake(t, st.Config(), client)
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		if got == nil || got.SerialNumber.Cmp(want.TLS.Leaf.SerialNumber) != 0 {
			t.Fatalf("the server presented %v, want %s", got, want.TLS.Leaf.Subject)
		}
	}
	serves(first)
	if v := st.Config().MinVersion; v != tls.VersionTLS12 {
		t.Fatalf("MinVersion %x, want TLS 1.2", v)
	}

	copyFile(t, second.KeyFile, keyFile)
	copyFile(t, second.CertFile, certFile)
	serves(second)
	if logs.count("reloaded the TLS certificate") != 1 {
		t.Fatalf("logged reloads: %q", logs.all())
	}

	// A broken version is logged once and the previous pair stays in use.
	replace(t, certFile, []byte("not a certificate"))
	serves(second)
	serves(second)
	if n := logs.count("cannot reload the TLS certificate"); n != 1 {
		t.Fatalf("the failure was logged %d times, want once: %q", n, logs.all())
	}
	copyFile(t, first.CertFile, certFile)
	serves(second) // the new certificate does not match the key
	copyFile(t, first.KeyFile, keyFile)
	serves(first)

	// Files are checked at most once per CheckInterval.
	slow, err := NewServerTLS(ServerTLSConfig{CertFile: certFile, KeyFile: keyFile, CheckInterval: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, second.KeyFile, keyFile)
	copyFile(t, second.CertFile, certFile)
	got, err := handshake(t, slow.Config(), client)
	if err != nil || got.SerialNumber.Cmp(first.TLS.Leaf.SerialNumber) != 0 {
		t.Fatalf("a check ran before it was due: %v %v", got, err)
	}
}

// A client CA file replaced while the server runs takes effect on the next
// handshakes: clients of the new CA are accepted, clients of the old one
// refused, with no restart.
func TestServerTLSReloadsTheClientCA(t *testing.T) {
	oldCA, newCA := testcerts.NewCA(t, "old-ca"), testcerts.NewCA(t, "new-ca")
	server := oldCA.Server(t, "server")
	oldClient, newClient := oldCA.Client(t, "old-client"), newCA.Client(t, "new-client")
	caFile := filepath.Join(t.TempDir(), "client-ca.pem")
	copyFile(t, oldCA.CertFile, caFile)
	logs := newLogRecorder()
	st, err := NewServerTLS(ServerTLSConfig{CertFile: server.CertFile, KeyFile: server.KeyFile, ClientCAFile: caFile, CheckInterval: time.Nanosecond}, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	connect := func(client *testcerts.Pair) error {
		cfg := &tls.Config{RootCAs: oldCA.Pool(), ServerName: "localhost"}
		if client != nil {
			cfg.Certificates = []tls.Certificate{client.TLS}
		}
		_, err := handshake(t, st.Config(), cfg)
		return err
	}
	if err := connect(&oldClient); err != nil {
		t.Fatalf("a client of the CA was refused: %v", err)
	}
	if err := connect(&newClient); err == nil {
		t.Fatal("a client of another CA was accepted")
	}
	if err := connect(nil); err == nil {
		t.Fatal("a client without a certificate was accepted")
	}

	copyFile(t, newCA.CertFile, caFile)
	if err := connect(&newClient); err != nil {
		t.Fatalf("a client of the new CA was refused after the rotation: %v", err)
	}
	if err := connect(&oldClient); err == nil {
		t.Fatal("a client of the old CA was accepted after the rotation")
	}
	if logs.count("reloaded the client CA certificates") != 1 {
		t.Fatalf("logged reloads: %q", logs.all())
	}

	// A broken CA file is logged and the previous CAs stay in force.
	replace(t, caFile, []byte("no PEM here"))
	if err := connect(&newClient); err != nil {
		t.Fatalf("the previous CAs were lost: %v", err)
	}
	if err := connect(&oldClient); err == nil {
		t.Fatal("a broken CA file let the old CA back in")
	}
	if logs.count("cannot reload the client CA certificates") != 1 {
		t.Fatalf("the failure was not logged once: %q", logs.all())
	}
}

func TestServerTLSConfigReportsEveryProblem(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	a, b := ca.Server(t, "a"), ca.Server(t, "b")
	names := ServerTLSNames{CertFile: "CERT", KeyFile: "KEY", ClientCAFile: "CA"}
	err := ServerTLSConfig{CertFile: a.CertFile, KeyFile: b.KeyFile, ClientCAFile: "/nonexistent/ca.pem", Names: names}.Validate()
	if err == nil {
		t.Fatal("a mismatched key pair and a missing CA file were accepted")
	}
	for _, want := range []string{
		"CERT and KEY: cannot load the certificate and key",
		`CA: cannot read "/nonexistent/ca.pem": no such file or directory`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing problem %q in:\n%v", want, err)
		}
	}
	if _, err := NewServerTLS(ServerTLSConfig{CertFile: a.CertFile, KeyFile: b.KeyFile}, nil); err == nil ||
		!strings.Contains(err.Error(), "CertFile and KeyFile: cannot load the certificate and key") {
		t.Errorf("NewServerTLS with a mismatched pair: %v", err)
	}

	err = ServerTLSConfig{KeyFile: a.KeyFile, ClientCAFile: a.CertFile, Names: names}.Validate()
	for _, want := range []string{
		"KEY is set but CERT is not",
		"CA (mutual TLS) needs TLS: set CERT and KEY too",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing problem %q in:\n%v", want, err)
		}
	}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	replace(t, notPEM, []byte("nothing"))
	if err := (ServerTLSConfig{CertFile: a.CertFile, KeyFile: a.KeyFile, ClientCAFile: notPEM}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "contains no PEM certificate") {
		t.Errorf("a CA file without certificates: %v", err)
	}
	if err := (ServerTLSConfig{CertFile: a.CertFile, KeyFile: a.KeyFile, ClientCAFile: ca.CertFile}).Validate(); err != nil {
		t.Errorf("valid files: %v", err)
	}
	if err := (ServerTLSConfig{}).Validate(); err != nil {
		t.Errorf("no TLS: %v", err)
	}
}
