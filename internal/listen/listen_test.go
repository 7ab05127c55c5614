package listen

import (
	"net"
	"strings"
	"testing"
)

func TestEndpoint(t *testing.T) {
	e := NewEndpoint("127.0.0.1:0", "SINK_X_ADDRESS")
	if e.Addr() != nil {
		t.Fatal("an address before Listen")
	}
	lis, err := e.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if e.Addr() == nil || e.Addr().String() != lis.Addr().String() || strings.HasSuffix(e.Addr().String(), ":0") {
		t.Fatalf("bound %v, listener %v", e.Addr(), lis.Addr())
	}
	taken := NewEndpoint(lis.Addr().String(), "SINK_X_ADDRESS")
	if _, err := taken.Listen(); err == nil || !strings.Contains(err.Error(), `cannot listen on SINK_X_ADDRESS "`+lis.Addr().String()+`"`) {
		t.Fatalf("taken address: %v", err)
	}
	if taken.Addr() != nil {
		t.Fatalf("a failed Listen bound %v", taken.Addr())
	}
	var _ net.Addr = e.Addr()
}
