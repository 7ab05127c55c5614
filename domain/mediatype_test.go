package domain_test

import (
	"strings"
	"testing"

	"github.com/sink-io/sink/domain"
)

func TestMediaType(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"application/json", "application/json"},
		{"application/json;charset=utf-8", "application/json"},
		{"application/json; charset=utf-8", "application/json"},
		{"application/json ; charset=utf-8", "application/json"},
		{"Application/JSON; Charset=UTF-8", "application/json"},
		{"application/bson", "application/bson"},
		{"text/plain; format=flowed; charset=\"utf-8\"", "text/plain"},
	} {
		got, err := domain.MediaType(c.in)
		if err != nil || got != c.want {
			t.Errorf("MediaType(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
		if !domain.IsMediaType(c.in, c.want) {
			t.Errorf("IsMediaType(%q, %q) = false", c.in, c.want)
		}
	}
	for _, bad := range []string{"", "json", "application/", "/json", "application/json; charset", "a/b/c", "application json", strings.Repeat("a", 300) + "/json"} {
		if got, err := domain.MediaType(bad); err == nil {
			t.Errorf("MediaType(%q) = %q, want an error", bad, got)
		}
		if domain.IsMediaType(bad, "application/json") {
			t.Errorf("IsMediaType(%q) matched", bad)
		}
	}
	if domain.IsMediaType("application/jsonx", domain.ContentTypeJSON) {
		t.Error("application/jsonx matched application/json")
	}
}

// IsMediaType's shortcut for content types without parameters, spaces or
// upper-case letters answers what parsing would.
func TestIsMediaTypeAgreesWithMediaType(t *testing.T) {
	inputs := []string{"application/json", "application/bson", "APPLICATION/JSON", "application/JSON", "application/json;", "application/json ",
		" application/json", "application/json\t", "application/jsón", "text/plain", "application/json+x", "application/json/", "application//json", ""}
	for _, in := range inputs {
		for _, want := range []string{domain.ContentTypeJSON, domain.ContentTypeBSON} {
			mt, err := domain.MediaType(in)
			if got, parsed := domain.IsMediaType(in, want), err == nil && mt == want; got != parsed {
				t.Errorf("IsMediaType(%q, %q) = %v, parsing says %v", in, want, got, parsed)
			}
		}
	}
}

// MediaType's shortcut for bare media types returns what parsing returns,
// and accepts nothing that parsing rejects.
func FuzzMediaTypeShortcut(f *testing.F) {
	for _, s := range []string{"application/json", "application/bson", "APPLICATION/JSON", "application/json; charset=utf-8", "a/b", "/b", "a/", "a//b",
		"a/b/c", "text/plain", "application/vnd.api+json", "application/x-www-form-urlencoded", "a/b=", "a(b/c", "a/b\x7f", "a/\xc3\xa9", "", "ab"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		if !domain.BareMediaTypeForTest(ct) {
			return
		}
		mt, err := domain.ParseMediaTypeForTest(ct)
		if err != nil || mt != ct {
			t.Fatalf("%q: the shortcut returns it as is, parsing returns %q, %v", ct, mt, err)
		}
	})
}
