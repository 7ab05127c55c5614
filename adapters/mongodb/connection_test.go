package mongodb

import (
	"strings"
	"testing"
)

func TestScrubURIAndHosts(t *testing.T) {
	cases := []struct{ uri, hosts string }{
		{"mongodb://u:secret@db1:27017,db2:27018/app?replicaSet=rs0", "db1:27017,db2:27018"},
		{"mongodb+srv://u:secret@cluster.example.net/?tls=true", "cluster.example.net"},
		{"mongodb://db", "db"},
		{"mongodb://u:sec%40ret@db/", "db"},
		// The driver takes '?' in the password as part of it (issue 9: the
		// old cut at the first '?' gave the host "sink:Ab").
		{"mongodb://sink:Ab?Cd9xyz@127.0.0.1:1/", "127.0.0.1:1"},
		{"mongodb://sink:Ab?Cd9xyz@127.0.0.1:1/?appName=x", "127.0.0.1:1"},
	}
	for _, c := range cases {
		if got := Hosts(c.uri); got != c.hosts {
			t.Errorf("hosts of %q = %q, want %q", c.uri, got, c.hosts)
		}
	}
	// Hosts are hidden rather than guessed when the URI is malformed or the
	// user info ambiguous (a raw '@' in the password).
	for _, uri := range []string{"mongodb://u:se:cret@bad host/\x7f", "mongodb://u:p@Hx8m/Zp4t@db/", "http://db/"} {
		if got := Hosts(uri); !strings.HasPrefix(got, "(not shown") {
			t.Errorf("hosts of %q = %q, want them not shown", uri, got)
		}
	}
	msg := scrubURI("driver said: mongodb://u:secret@db/ / secret / sec%40ret", "mongodb://u:secret@db/")
	if strings.Contains(msg, "secret") {
		t.Errorf("scrubbed message leaks: %s", msg)
	}
}
