package cli

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sink-io/sink/adapters/auth"
)

func TestHashTokenCommand(t *testing.T) {
	code, out, errs := sink(t, "secret\n", "hash-token")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if got := strings.TrimSpace(out); got != auth.HashToken("secret") {
		t.Fatalf("hash-token printed %q", got)
	}
	code, out, _ = sink(t, "", "hash-token", "--generate")
	if code != ExitOK {
		t.Fatalf("--generate: exit %d", code)
	}
	var token, hash string
	if _, err := fmt.Sscanf(out, "token: %s\ntoken_hash: %s\n", &token, &hash); err != nil || auth.HashToken(token) != hash {
		t.Fatalf("--generate printed %q (%v)", out, err)
	}
	if code, _, errs := sink(t, "", "hash-token", "my-token"); code != ExitUsage || !strings.HasPrefix(errs, "sink hash-token: ") {
		t.Fatalf("a token argument must be refused (exit 2), got %d %q", code, errs)
	}
	if code, _, _ := sink(t, "", "hash-token"); code != ExitUsage {
		t.Fatalf("empty input: exit %d, want 2", code)
	}
}
