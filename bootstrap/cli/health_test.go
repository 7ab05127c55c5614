package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealth(t *testing.T) {
	ready := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: storage: did not answer\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}))
	defer srv.Close()
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := health(args, IO{Stdout: &out, Stderr: &errb})
		return code, out.String(), errb.String()
	}
	if code, out, _ := run("--url", srv.URL+"/readyz"); code != ExitOK || out != "ok\n" {
		t.Errorf("ready: exit %d, %q", code, out)
	}
	ready = false
	if code, _, errs := run("--url", srv.URL+"/readyz"); code != ExitUnavailable || !strings.Contains(errs, "503") || !strings.Contains(errs, "not ready: storage") {
		t.Errorf("not ready: exit %d, %q", code, errs)
	}
	srv.Close()
	if code, _, _ := run("--url", srv.URL+"/readyz", "--timeout", "1s"); code != ExitUnavailable {
		t.Errorf("no server: exit %d", code)
	}
	if code, _, _ := run("extra"); code != ExitUsage {
		t.Errorf("extra argument: exit %d", code)
	}
}
