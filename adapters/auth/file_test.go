package auth

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func fileFor(tokens map[string]string) string {
	var ps []string
	for name, tok := range tokens {
		ps = append(ps, fmt.Sprintf(`{"name":%q,"token_hashes":[%q],"grants":[{"namespace":"shop","rights":["read"]}]}`, name, HashToken(tok)))
	}
	return `{"principals":[` + strings.Join(ps, ",") + `]}`
}

func TestHashToken(t *testing.T) {
	// sha256("secret") — a fixed vector, so the file format never changes silently.
	if got := HashToken("secret"); got != "sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b" {
		t.Fatalf("HashToken = %s", got)
	}
	a, err := GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := GenerateToken()
	if a == b || len(a) < 40 {
		t.Fatalf("tokens %q %q", a, b)
	}
}

func TestCheckReportsEveryProblem(t *testing.T) {
	dup := HashToken("t")
	err := Check([]byte(`{"principals":[
		{"name":"","grants":[]},
		{"name":"a","token_hashes":["md5:abc","` + dup + `"],"grants":[{"rights":["admin"]},{"rights":[]}]},
		{"name":"a","token_hashes":["` + dup + `"],"certificate_identities":["x",""],"grants":[]}
	]}`))
	if err == nil {
		t.Fatal("invalid file accepted")
	}
	for _, want := range []string{
		"principals[0]: name must not be empty",
		"principals[0]: has neither token_hashes nor certificate_identities",
		`principals[1] (a): token_hashes[0]: must start with "sha256:"`,
		`unknown right "admin"`,
		"grants[1]: rights must list at least one",
		"principals[2] (a): the name is used by another principal",
		`token_hashes[0] is also a token of "a"`,
		"certificate_identities[1] must not be empty",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), strings.TrimPrefix(dup, HashPrefix)) {
		t.Error("problems must not quote token hashes")
	}
	if err := Check([]byte(`{"principals":[], "extra":1}`)); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("unknown fields must be refused: %v", err)
	}
	if err := Check([]byte(`{"principals":[]} {}`)); err == nil {
		t.Fatal("trailing content must be refused")
	}
}

func TestAuthenticate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.json")
	writeFile(t, path, `{"principals":[
		{"name":"reader","token_hashes":["`+HashToken("tok-r")+`"],"grants":[{"namespace":"shop","dataset":"orders-*","rights":["read"]}]},
		{"name":"svc","certificate_identities":["svc.internal","spiffe://x/svc"],"grants":[{"rights":["read","write","delete"]}]}
	]}`)
	var logs bytes.Buffer
	a, err := Load(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := a.Authenticate(ctx, ports.Credentials{BearerToken: "tok-r"})
	if err != nil || p.Name != "reader" {
		t.Fatalf("token: %v %v", p, err)
	}
	ref := domain.DatasetRef{Store: "primary", Namespace: "shop", Dataset: "orders-eu"}
	if !p.Allows(ref, domain.RightRead) || p.Allows(ref, domain.RightWrite) {
		t.Fatalf("grants: %+v", p.Grants)
	}
	if p, err := a.Authenticate(ctx, ports.Credentials{CertificateIdentities: []string{"other", "spiffe://x/svc"}}); err != nil || p.Name != "svc" {
		t.Fatalf("certificate: %v %v", p, err)
	}
	for name, c := range map[string]ports.Credentials{
		"wrong token":            {BearerToken: "tok-wrong-secret"},
		"wrong token, good cert": {BearerToken: "tok-wrong-secret", CertificateIdentities: []string{"svc.internal"}},
		"unknown cert":           {CertificateIdentities: []string{"intruder"}},
		"nothing":                {},
	} {
		_, err := a.Authenticate(ctx, c)
		if domain.CodeOf(err) != domain.CodeUnauthenticated {
			t.Errorf("%s: %v, want UNAUTHENTICATED", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "tok-wrong-secret") {
			t.Errorf("%s: the error quotes the token: %v", name, err)
		}
	}
	if strings.Contains(logs.String(), "tok-") {
		t.Fatalf("a token was logged: %s", logs.String())
	}
}

func TestReloadAndWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.json")
	writeFile(t, path, fileFor(map[string]string{"old": "token-old"}))
	a, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := a.Reload(); err != nil || changed {
		t.Fatalf("unchanged file: changed=%v err=%v", changed, err)
	}
	// A broken version is refused and the previous one stays in force.
	writeFile(t, path, `{"principals":[{"name":"x"`)
	if _, err := a.Reload(); err == nil {
		t.Fatal("broken file accepted")
	}
	if _, err := a.Authenticate(context.Background(), ports.Credentials{BearerToken: "token-old"}); err != nil {
		t.Fatalf("previous version lost: %v", err)
	}
	// Watch picks up a new version on trigger (as SIGHUP does).
	writeFile(t, path, fileFor(map[string]string{"new": "token-new"}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	trigger := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); a.Watch(ctx, time.Hour, trigger) }()
	before := a.Loads()
	trigger <- struct{}{} // received: the reload runs next
	trigger <- struct{}{} // received: the first reload has finished
	if a.Loads() != before+1 {
		t.Fatalf("loads %d, want %d", a.Loads(), before+1)
	}
	if p, err := a.Authenticate(context.Background(), ports.Credentials{BearerToken: "token-new"}); err != nil || p.Name != "new" {
		t.Fatalf("new token: %v %v", p, err)
	}
	if _, err := a.Authenticate(context.Background(), ports.Credentials{BearerToken: "token-old"}); err == nil {
		t.Fatal("the removed token still works")
	}
	cancel()
	<-done
}

// FuzzParseAuthorizationFile: no input makes the parser panic, and an
// accepted file has named principals that can authenticate somehow.
func FuzzParseAuthorizationFile(f *testing.F) {
	f.Add([]byte(`{"principals":[{"name":"a","token_hashes":["sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"],"grants":[{"store":"*","namespace":"shop","dataset":"*","rights":["read","write"]}]}]}`))
	f.Add([]byte(`{"principals":[{"name":"b","certificate_identities":["client-1"],"grants":[]}]}`))
	f.Add([]byte(`{"principals":[]}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tbl, err := parse(data)
		if err != nil {
			if tbl != nil {
				t.Fatal("a rejected file must not yield a table")
			}
			return
		}
		for _, p := range tbl.byToken {
			if p.Name == "" {
				t.Fatal("accepted a principal without a name")
			}
		}
		for _, p := range tbl.byIdentity {
			if p.Name == "" {
				t.Fatal("accepted a principal without a name")
			}
		}
	})
}
