package pemfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestErrorsNameTheSettingAndFile(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCertPool("CA_FILE", missing); err == nil || !strings.HasPrefix(err.Error(), `CA_FILE: cannot read "`+missing+`": `) || strings.Count(err.Error(), missing) != 1 {
		t.Errorf("missing CA file: %v", err)
	}
	if _, err := LoadCertPool("CA_FILE", empty); err == nil || !strings.Contains(err.Error(), "contains no PEM certificate") {
		t.Errorf("CA file without PEM: %v", err)
	}
	// Both unreadable files are reported at once.
	_, err := LoadKeyPair("CERT_FILE", missing, "KEY_FILE", missing+"2")
	if err == nil || !strings.Contains(err.Error(), "CERT_FILE: cannot read") || !strings.Contains(err.Error(), "KEY_FILE: cannot read") {
		t.Errorf("missing key pair: %v", err)
	}
	if _, err := LoadKeyPair("CERT_FILE", empty, "KEY_FILE", empty); err == nil || !strings.Contains(err.Error(), "CERT_FILE and KEY_FILE: cannot load") {
		t.Errorf("bad key pair: %v", err)
	}
}
