package main

import (
	"net/url"
	"strings"
	"testing"
)

// TestCheckPostgreSQLURL checks the PostgreSQL URL's validation, and that
// no error shows the password.
func TestCheckPostgreSQLURL(t *testing.T) {
	const pw = "Pq7r?Wv3k/Jx8m@Tp4t:Mc6n%Ub2s"
	good := (&url.URL{Scheme: "postgres", User: url.UserPassword("sink", pw), Host: "127.0.0.1:5432", Path: "/postgres"}).String()
	if err := checkPostgreSQLURL(good); err != nil {
		t.Errorf("escaped URL: %v", err)
	}
	for _, bad := range []string{
		"",
		"postgres://sink:" + pw + "@127.0.0.1:5432/postgres", // not escaped: '%Ub' is no escape
		"mysql://sink:Pq7rWv3k@127.0.0.1/x",
		"postgres:///postgres?password=Pq7rWv3k",
	} {
		err := checkPostgreSQLURL(bad)
		if err == nil {
			t.Errorf("%q: accepted", bad)
			continue
		}
		for _, frag := range []string{"Pq7r", "Wv3k", "Ub2s"} {
			if strings.Contains(err.Error(), frag) {
				t.Errorf("%q: error %q shows the password", bad, err)
			}
		}
	}
}
