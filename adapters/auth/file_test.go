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
		{"name":"a","token_hashes":["` + dup + `"],"certificate_identities":["x","","dns:","spiffe://x/y"],"grants":[]}
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
		`certificate_identities[0]: "x" has no type: write "dns:x" for a DNS SAN or "cn:x" for the subject common name`,
		"certificate_identities[1]: must not be empty",
		`certificate_identities[2]: "dns:" has an empty dns value`,
		`certificate_identities[3]: "spiffe://x/y" has no type: write "uri:spiffe://x/y" for a URI SAN`,
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
		{"name":"svc","certificate_identities":["dns:svc.internal","uri:spiffe://x/svc"],"grants":[{"rights":["read","write","delete"]}]}
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
	if p, err := a.Authenticate(ctx, ports.Credentials{CertificateIdentities: []string{"dns:other", "uri:spiffe://x/svc"}}); err != nil || p.Name != "svc" {
		t.Fatalf("certificate: %v %v", p, err)
	}
	for name, c := range map[string]ports.Credentials{
		"wrong token":            {BearerToken: "tok-wrong-secret"},
		"wrong token, good cert": {BearerToken: "tok-wrong-secret", CertificateIdentities: []string{"dns:svc.internal"}},
		"unknown cert":           {CertificateIdentities: []string{"dns:intruder"}},
		"untyped name":           {CertificateIdentities: []string{"svc.internal"}},
		"common name as DNS":     {CertificateIdentities: []string{"cn:svc.internal"}},
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
	f.Add([]byte(`{"principals":[{"name":"b","certificate_identities":["cn:client-1"],"grants":[]}]}`))
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

// A certificate identity matches only a certificate name of its declared
// type, and several matching identities are resolved by the documented
// precedence (URI, DNS, e-mail, common name), whatever their order.
func TestCertificateIdentitiesAreTyped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.json")
	writeFile(t, path, `{"principals":[
		{"name":"billing","certificate_identities":["cn:billing.internal"],"grants":[{"rights":["read"]}]},
		{"name":"innocent","certificate_identities":["cn:innocent.internal"],"grants":[{"rights":["read"]}]},
		{"name":"web","certificate_identities":["dns:Web.Internal."],"grants":[{"rights":["read"]}]},
		{"name":"spiffe","certificate_identities":["uri:spiffe://example.org/svc"],"grants":[{"rights":["read"]}]},
		{"name":"ops","certificate_identities":["email:ops@example.org"],"grants":[{"rights":["read"]}]}
	]}`)
	a, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		ids  []string
		want string // "" = refused
	}{
		// CN innocent.internal with a DNS SAN billing.internal is innocent,
		// never billing (declared as a common name).
		"DNS SAN does not match a CN identity": {[]string{"dns:billing.internal", "cn:innocent.internal"}, "innocent"},
		"only the DNS SAN":                     {[]string{"dns:billing.internal"}, ""},
		// and a common name never matches a DNS identity.
		"CN does not match a DNS identity": {[]string{"cn:web.internal"}, ""},
		"DNS names ignore case":            {[]string{"dns:WEB.internal"}, "web"},
		"URI before DNS":                   {[]string{"cn:billing.internal", "dns:web.internal", "uri:spiffe://example.org/svc"}, "spiffe"},
		"DNS before e-mail":                {[]string{"email:ops@example.org", "dns:web.internal"}, "web"},
		"e-mail before CN":                 {[]string{"cn:billing.internal", "email:ops@example.org"}, "ops"},
		"URI does not match as a CN":       {[]string{"cn:spiffe://example.org/svc"}, ""},
		"untyped names match nothing":      {[]string{"billing.internal", "innocent.internal"}, ""},
	} {
		p, err := a.Authenticate(context.Background(), ports.Credentials{CertificateIdentities: tc.ids})
		switch {
		case tc.want == "" && domain.CodeOf(err) != domain.CodeUnauthenticated:
			t.Errorf("%s: %v %v, want UNAUTHENTICATED", name, p, err)
		case tc.want != "" && (err != nil || p.Name != tc.want):
			t.Errorf("%s: %v %v, want %s", name, p, err, tc.want)
		}
	}
	// The refusal lists a bounded number of identities.
	many := make([]string, 50)
	for i := range many {
		many[i] = "dns:" + strings.Repeat("x", 500)
	}
	_, err = a.Authenticate(context.Background(), ports.Credentials{CertificateIdentities: many})
	if err == nil || len(err.Error()) > 1000 || !strings.Contains(err.Error(), "and 46 more") {
		t.Fatalf("refusal of a certificate with many names: %d bytes: %.200v", len(err.Error()), err)
	}
}

// A file writable by its group or others is reported once when it is
// loaded and when its mode changes, naming the path and mode only.
func TestWritableFileWarns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.json")
	writeFile(t, path, fileFor(map[string]string{"a": "token-a-secret"}))
	var logs bytes.Buffer
	a, err := Load(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	const warning = "the authorization file is writable by its group or by others"
	if strings.Contains(logs.String(), warning) {
		t.Fatalf("a 0600 file was reported:\n%s", logs.String())
	}
	for _, mode := range []os.FileMode{0o620, 0o602} {
		logs.Reset()
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Reload(); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Reload(); err != nil { // unchanged: no second line
			t.Fatal(err)
		}
		want := fmt.Sprintf("path=%s mode=%#o", path, mode)
		if strings.Count(logs.String(), warning) != 1 || !strings.Contains(logs.String(), want) {
			t.Fatalf("mode %#o: want one warning with %q:\n%s", mode, want, logs.String())
		}
	}
	// A new version of a writable file is reported again (reload).
	logs.Reset()
	writeFile(t, path, fileFor(map[string]string{"b": "token-b-secret"}))
	if err := os.Chmod(path, 0o602); err != nil {
		t.Fatal(err)
	}
	if changed, err := a.Reload(); err != nil || !changed {
		t.Fatalf("reload: %v %v", changed, err)
	}
	if strings.Count(logs.String(), warning) != 1 || strings.Contains(logs.String(), "token-") || strings.Contains(logs.String(), "sha256") {
		t.Fatalf("reload of a writable file:\n%s", logs.String())
	}
	// At start-up too.
	logs.Reset()
	if _, err := Load(path, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	if strings.Count(logs.String(), warning) != 1 {
		t.Fatalf("start-up with a writable file:\n%s", logs.String())
	}
}
