package domain

import (
	"context"
	"testing"
)

func TestMatchPattern(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"orders", "orders", true},
		{"orders", "orders2", false},
		{"orders-*", "orders-eu", true},
		{"orders-*", "orders", false},
		{"*-eu", "orders-eu", true},
		{"*-eu", "orders-us", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxcyyb", false},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"**", "x", true},
		{"", "", true},
		{"", "x", false},
	}
	for _, c := range cases {
		if got := MatchPattern(c.pattern, c.name); got != c.want {
			t.Errorf("MatchPattern(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

func TestPrincipalAllows(t *testing.T) {
	p := &Principal{Name: "svc", Grants: []Grant{
		{Store: "*", Namespace: "shop", Dataset: "orders", Rights: RightRead | RightWrite},
		{Store: "primary", Namespace: "shop", Dataset: "carts-*", Rights: RightAll},
	}}
	orders := DatasetRef{Store: "primary", Namespace: "shop", Dataset: "orders"}
	carts := DatasetRef{Store: "primary", Namespace: "shop", Dataset: "carts-eu"}
	otherStore := DatasetRef{Store: "archive", Namespace: "shop", Dataset: "carts-eu"}
	checks := []struct {
		d     DatasetRef
		right Right
		want  bool
	}{
		{orders, RightRead, true}, {orders, RightWrite, true}, {orders, RightDelete, false},
		{carts, RightDelete, true}, {otherStore, RightRead, false},
		{DatasetRef{Store: "primary", Namespace: "bank", Dataset: "orders"}, RightRead, false},
	}
	for _, c := range checks {
		if got := p.Allows(c.d, c.right); got != c.want {
			t.Errorf("Allows(%v, %v) = %v, want %v", c.d, c.right, got, c.want)
		}
	}
	var none *Principal
	if none.Allows(orders, RightRead) {
		t.Fatal("a nil principal must be allowed nothing")
	}
	if RightFor(MutationMerge) != RightWrite || RightFor(MutationDelete) != RightDelete || RightFor(0) != RightRead {
		t.Fatal("RightFor")
	}
	if _, err := ParseRight("admin"); err == nil {
		t.Fatal("unknown right accepted")
	}
	if RightAll.String() != "read,write,delete" || Right(0).String() != "none" {
		t.Fatalf("Right.String: %q", RightAll.String())
	}
}

func TestPrincipalContext(t *testing.T) {
	if _, ok := PrincipalFrom(context.Background()); ok {
		t.Fatal("empty context has a principal")
	}
	p := &Principal{Name: "x"}
	got, ok := PrincipalFrom(WithPrincipal(context.Background(), p))
	if !ok || got != p {
		t.Fatal("principal lost")
	}
	if _, ok := PrincipalFrom(WithPrincipal(context.Background(), nil)); ok {
		t.Fatal("nil principal must not count")
	}
}
