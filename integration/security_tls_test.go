package integration_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/internal/testkit"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	"github.com/sink-io/sink/internal/testkit/testcerts"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

func TestTLSRefusesPlaintextClients(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	srv := ca.Server(t, "sink")
	s := sinktest.Start(t, map[string]string{"SINK_TLS_CERT_FILE": srv.CertFile, "SINK_TLS_KEY_FILE": srv.KeyFile})

	// sinktest's own client speaks plaintext.
	_, err := s.Client.Read(ctx(t), &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: addr("n", "d", "k")}}})
	expectCode(t, "plaintext client", err, codes.Unavailable)

	c := dialTLS(t, s.Addr, ca, nil)
	expectApplied(t, "put over TLS", write(t, c, putOp(addr("n", "d", "k"), `{"a":1}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))[0])
	if got := readJSON(t, c, addr("n", "d", "k")); got != `{"a":1}` {
		t.Fatalf("read over TLS: %q", got)
	}

	// A client that does not trust the server's CA refuses the server.
	other := testcerts.NewCA(t, "other")
	_, err = dialTLS(t, s.Addr, other, nil).Read(ctx(t), &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: addr("n", "d", "k")}}})
	expectCode(t, "untrusted server", err, codes.Unavailable)
}

func TestMutualTLSRequiresAVerifiedClientCertificate(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	srv := ca.Server(t, "sink")
	s := sinktest.Start(t, map[string]string{
		"SINK_TLS_CERT_FILE": srv.CertFile, "SINK_TLS_KEY_FILE": srv.KeyFile, "SINK_TLS_CLIENT_CA_FILE": ca.CertFile,
	})
	req := &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: addr("n", "d", "k")}}}

	_, err := dialTLS(t, s.Addr, ca, nil).Read(ctx(t), req)
	expectCode(t, "no client certificate", err, codes.Unavailable)

	rogue := testcerts.NewCA(t, "rogue").Client(t, "app")
	_, err = dialTLS(t, s.Addr, ca, &rogue).Read(ctx(t), req)
	expectCode(t, "client certificate of another CA", err, codes.Unavailable)

	good := ca.Client(t, "app")
	c := dialTLS(t, s.Addr, ca, &good)
	expectApplied(t, "put with a client certificate", write(t, c, putOp(addr("n", "d", "k"), `{"a":1}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))[0])
	if got := readJSON(t, c, addr("n", "d", "k")); got != `{"a":1}` {
		t.Fatalf("read with a client certificate: %q", got)
	}
}

// Certificate identities are typed: a DNS SAN never passes for a common
// name, nor the other way round, and untyped identities (the old format,
// where CN innocent.internal with a DNS SAN billing.internal became
// "billing") stop start-up with a message that tells how to migrate.
func TestCertificateIdentitiesAreTyped(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	srv := ca.Server(t, "sink")
	mixed := ca.Client(t, "innocent.internal", "billing.internal") // CN innocent.internal, DNS SAN billing.internal
	cnOnly := ca.Client(t, "billing.internal")                     // CN billing.internal, no SAN
	req := &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: addr("billing", "invoices", "i-1")}}}
	start := func(certs ...string) string {
		file := newAuthFile(t, principalSpec{name: "billing", certs: certs, grants: `[{"namespace":"billing","rights":["read"]}]`})
		s := sinktest.Start(t, map[string]string{
			"SINK_TLS_CERT_FILE": srv.CertFile, "SINK_TLS_KEY_FILE": srv.KeyFile, "SINK_TLS_CLIENT_CA_FILE": ca.CertFile,
			"SINK_AUTH_TOKEN_FILE": file,
		})
		return s.Addr
	}

	// billing is declared by its common name: the DNS SAN of another
	// certificate does not make it billing; its own CN does.
	a := start("cn:billing.internal")
	_, err := dialTLS(t, a, ca, &mixed).Read(ctx(t), req)
	expectCode(t, "DNS SAN billing.internal against cn:billing.internal", err, codes.Unauthenticated)
	if _, err := dialTLS(t, a, ca, &cnOnly).Read(ctx(t), req); err != nil {
		t.Fatalf("CN billing.internal against cn:billing.internal: %v", err)
	}

	// billing is declared by its DNS name: a common name does not match it.
	b := start("dns:billing.internal")
	_, err = dialTLS(t, b, ca, &cnOnly).Read(ctx(t), req)
	expectCode(t, "CN billing.internal against dns:billing.internal", err, codes.Unauthenticated)
	if _, err := dialTLS(t, b, ca, &mixed).Read(ctx(t), req); err != nil {
		t.Fatalf("DNS SAN billing.internal against dns:billing.internal: %v", err)
	}

	// The old untyped form is refused at start-up, with the way out.
	_, err = bootstrap.LoadConfig(testkit.Env(
		"SINK_HTTP_ADDRESS", "off",
		"SINK_AUTH_TOKEN_FILE", newAuthFile(t, principalSpec{name: "billing", certs: []string{"billing.internal"}, grants: `[{"rights":["read"]}]`}),
	))
	if err == nil || !strings.Contains(err.Error(), `"billing.internal" has no type: write "dns:billing.internal" for a DNS SAN or "cn:billing.internal" for the subject common name`) {
		t.Fatalf("an untyped identity: %v", err)
	}
}
