package integration_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/sink-io/sink/internal/testkit/sinktest"
	"github.com/sink-io/sink/internal/testkit/testcerts"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

const (
	adminToken  = "tok-admin-0123456789abcdef"
	ordersToken = "tok-orders-0123456789abcdef"
	readerToken = "tok-reader-0123456789abcdef"
	wrongToken  = "tok-wrong-0123456789abcdef"
)

func authPrincipals() []principalSpec {
	return []principalSpec{
		{name: "admin", token: adminToken, grants: `[{"rights":["read","write","delete"]}]`},
		// orders-svc may read and write shop/orders-*, and only read shop/customers.
		{name: "orders-svc", token: ordersToken, grants: `[
			{"namespace":"shop","dataset":"orders-*","rights":["read","write"]},
			{"store":"primary","namespace":"shop","dataset":"customers","rights":["read"]}]`},
		{name: "reader", token: readerToken, grants: `[{"namespace":"shop","rights":["read"]}]`},
	}
}

func TestTokenAuthorizationIsPerOperation(t *testing.T) {
	logs := &logCapture{}
	s := sinktest.Start(t, map[string]string{"SINK_AUTH_TOKEN_FILE": newAuthFile(t, authPrincipals()...)}, logs.option())
	c := s.Client
	admin := withToken(t, adminToken)
	if _, err := c.Write(admin, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{
		putOp(addr("shop", "customers", "c-1"), `{"name":"Ada"}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil),
		putOp(addr("bank", "accounts", "a-1"), `{"balance":5}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil),
	}}); err != nil {
		t.Fatal(err)
	}

	// A mixed request: the allowed operations proceed, the others are
	// denied one by one and write nothing.
	orders := withToken(t, ordersToken)
	resp, err := c.Write(orders, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{
		putOp(addr("shop", "orders-eu", "o-1"), `{"total":10}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil),
		putOp(addr("shop", "customers", "c-1"), `{"name":"Mallory"}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil),
		putOp(addr("bank", "accounts", "a-1"), `{"balance":1000000}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil),
		mergeOp(addr("shop", "orders-eu", "o-1"), "merge-patch", `{"paid":true}`),
		mergeOp(addr("shop", "customers", "c-2"), "merge-patch", `{"x":1}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	expectApplied(t, "allowed put", resp.Results[0])
	expectApplied(t, "allowed merge", resp.Results[3])
	for _, i := range []int{1, 2, 4} {
		r := resp.Results[i]
		expectFailure(t, "denied write", r.Status, r.Error, failedStatus, uint32(codes.PermissionDenied), `principal "orders-svc" has no write right`)
		if r.Error.Reason != "PERMISSION_DENIED" || r.Error.Retryable {
			t.Fatalf("denied write %d: %+v", i, r.Error)
		}
	}
	rr, err := c.Read(admin, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{
		{Address: addr("shop", "customers", "c-1")}, {Address: addr("bank", "accounts", "a-1")},
		{Address: addr("shop", "customers", "c-2")}, {Address: addr("shop", "orders-eu", "o-1")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if string(rr.Results[0].Document.Data) != `{"name":"Ada"}` || string(rr.Results[1].Document.Data) != `{"balance":5}` ||
		rr.Results[2].Status != notFound || string(rr.Results[3].Document.Data) != `{"total":10,"paid":true}` {
		t.Fatalf("after the mixed write: %v", rr.Results)
	}

	// Reads: per operation too.
	rr, err = c.Read(orders, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{
		{Address: addr("shop", "customers", "c-1")}, {Address: addr("bank", "accounts", "a-1")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if rr.Results[0].Status != found || rr.Results[1].Status != failedStatus || rr.Results[1].Document != nil ||
		rr.Results[1].Error.GetCode() != uint32(codes.PermissionDenied) {
		t.Fatalf("mixed read: %v", rr.Results)
	}

	// Deletes need the delete right.
	dr, err := c.Delete(withToken(t, readerToken), &sinkv1.DeleteRequest{Operations: []*sinkv1.DeleteOperation{{Address: addr("shop", "customers", "c-1")}}})
	if err != nil || dr.Results[0].Error.GetCode() != uint32(codes.PermissionDenied) {
		t.Fatalf("delete without the right: %v %v", err, dr)
	}
	if readJSONCtx(t, c, admin, addr("shop", "customers", "c-1")) != `{"name":"Ada"}` {
		t.Fatal("a denied delete removed the record")
	}
	for _, tok := range []string{adminToken, ordersToken, readerToken} {
		if strings.Contains(logs.String(), tok) {
			t.Fatalf("a token appears in the logs:\n%s", logs.String())
		}
	}
}

func TestAnonymousAndWrongTokensAreUnauthenticated(t *testing.T) {
	logs := &logCapture{}
	s := sinktest.Start(t, map[string]string{"SINK_AUTH_TOKEN_FILE": newAuthFile(t, authPrincipals()...)}, logs.option())
	req := &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{putOp(addr("shop", "orders-eu", "o-9"), `{}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil)}}

	_, err := s.Client.Write(ctx(t), req)
	expectCode(t, "anonymous", err, codes.Unauthenticated)
	_, err = s.Client.Write(withToken(t, wrongToken), req)
	st := expectCode(t, "wrong token", err, codes.Unauthenticated)
	if strings.Contains(st.Message(), wrongToken) {
		t.Fatalf("the error quotes the token: %v", err)
	}
	_, err = s.Client.Write(metadata.AppendToOutgoingContext(ctx(t), "authorization", "Basic "+wrongToken), req)
	expectCode(t, "not a bearer token", err, codes.Unauthenticated)
	_, err = s.Client.Write(metadata.AppendToOutgoingContext(ctx(t), "authorization", "Bearer "+adminToken, "authorization", "Bearer "+wrongToken), req)
	expectCode(t, "two tokens", err, codes.Unauthenticated)

	// Nothing was written by the refused calls.
	if readJSONCtx(t, s.Client, withToken(t, adminToken), addr("shop", "orders-eu", "o-9")) != "" {
		t.Fatal("a refused call wrote")
	}
	// Health checks need no credentials (probes).
	hr, err := healthpb.NewHealthClient(s.Conn).Check(ctx(t), &healthpb.HealthCheckRequest{})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without a token: %v %v", hr, err)
	}
	if strings.Contains(logs.String(), wrongToken) || strings.Contains(logs.String(), adminToken) {
		t.Fatalf("a token appears in the logs:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "refused a call") {
		t.Fatalf("refusals are not logged:\n%s", logs.String())
	}
}

func TestTokenFileReloadTakesEffect(t *testing.T) {
	for _, via := range []string{"polling", "SIGHUP"} {
		t.Run(via, func(t *testing.T) {
			file := newAuthFile(t, principalSpec{name: "old", token: "tok-old-0123456789", grants: `[{"rights":["read"]}]`})
			env := map[string]string{"SINK_AUTH_TOKEN_FILE": file, "SINK_AUTH_RELOAD_INTERVAL": "20ms"}
			if via == "SIGHUP" {
				env["SINK_AUTH_RELOAD_INTERVAL"] = "1h" // only the signal can reload it in time
			}
			s := sinktest.Start(t, env)
			req := &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: addr("n", "d", "k")}}}
			if _, err := s.Client.Read(withToken(t, "tok-old-0123456789"), req); err != nil {
				t.Fatalf("old token before the reload: %v", err)
			}
			writeAuthFile(t, file, principalSpec{name: "new", token: "tok-new-0123456789", grants: `[{"rights":["read"]}]`})
			if via == "SIGHUP" {
				if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
			}
			// Await the reload: poll the observable effect, bounded in time.
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, err := s.Client.Read(withToken(t, "tok-new-0123456789"), req)
				if err == nil {
					break
				}
				expectCode(t, "new token before the reload", err, codes.Unauthenticated)
				if time.Now().After(deadline) {
					t.Fatal("the new token file did not take effect within 10s")
				}
				time.Sleep(10 * time.Millisecond)
			}
			_, err := s.Client.Read(withToken(t, "tok-old-0123456789"), req)
			expectCode(t, "old token after the reload", err, codes.Unauthenticated)
		})
	}
}

func TestMutualTLSIdentityIsAPrincipal(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	srv := ca.Server(t, "sink")
	file := newAuthFile(t,
		principalSpec{name: "billing", certs: []string{"dns:billing.internal"}, grants: `[{"namespace":"billing","rights":["read","write"]}]`},
		principalSpec{name: "admin", token: adminToken, grants: `[{"rights":["read","write","delete"]}]`},
	)
	s := sinktest.Start(t, map[string]string{
		"SINK_TLS_CERT_FILE": srv.CertFile, "SINK_TLS_KEY_FILE": srv.KeyFile, "SINK_TLS_CLIENT_CA_FILE": ca.CertFile,
		"SINK_AUTH_TOKEN_FILE": file,
	})
	billingCert := ca.Client(t, "svc-7", "billing.internal") // identity from a DNS SAN
	c := dialTLS(t, s.Addr, ca, &billingCert)
	res := write(t, c,
		putOp(addr("billing", "invoices", "i-1"), `{"sum":3}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil),
		putOp(addr("shop", "orders", "o-1"), `{}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))
	expectApplied(t, "allowed by the certificate's grants", res[0])
	expectFailure(t, "outside the certificate's grants", res[1].Status, res[1].Error, failedStatus, uint32(codes.PermissionDenied), `principal "billing"`)

	stranger := ca.Client(t, "stranger.internal")
	_, err := dialTLS(t, s.Addr, ca, &stranger).Read(ctx(t), &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: addr("billing", "invoices", "i-1")}}})
	expectCode(t, "a verified certificate of no principal", err, codes.Unauthenticated)

	// A token takes precedence over the certificate.
	rr, err := c.Read(withToken(t, adminToken), &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: addr("shop", "orders", "o-1")}}})
	if err != nil || rr.Results[0].Error.GetCode() != 0 {
		t.Fatalf("token over mTLS: %v %v", err, rr)
	}
}

// readJSONCtx is readJSON with the caller's context (credentials).
func readJSONCtx(t testing.TB, c sinkv1.SinkClient, cx context.Context, a *sinkv1.RecordAddress) string {
	t.Helper()
	resp, err := c.Read(cx, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: a}}})
	if err != nil {
		t.Fatalf("read %v: %v", a, err)
	}
	switch r := resp.Results[0]; r.Status {
	case found:
		return string(r.Document.Data)
	case notFound:
		return ""
	default:
		t.Fatalf("read %v: %v %v", a, r.Status, r.Error)
		return ""
	}
}
