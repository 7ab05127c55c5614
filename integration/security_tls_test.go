package integration_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/sink-io/sink/integration/sinktest"
	"github.com/sink-io/sink/integration/testcerts"
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
