package domain

import (
	"context"
	"testing"
)

func TestRequestInfoTravelsInTheContext(t *testing.T) {
	if got := RequestFromContext(context.Background()); got != (RequestInfo{}) {
		t.Fatalf("empty context: %+v", got)
	}
	want := RequestInfo{ID: "r-1", Method: "/sink.v1.Sink/Write"}
	ctx := ContextWithRequest(context.Background(), want)
	if got := RequestFromContext(ctx); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// The request's context keeps its parent's values, deadline and
// cancellation, and a context derived from it keeps the request.
func TestRequestContextKeepsItsParent(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	want := RequestInfo{ID: "r-2", Method: "/sink.v1.Sink/Read"}
	ctx := ContextWithRequest(parent, want)
	if got := ctx.Value(key{}); got != "v" {
		t.Fatalf("parent's value: %v", got)
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	if got := RequestFromContext(child); got != want {
		t.Fatalf("derived context: got %+v, want %+v", got, want)
	}
	cancel()
	<-child.Done() // the parent's cancellation reaches it
	if ctx.Err() != context.Canceled || child.Err() != context.Canceled {
		t.Fatalf("errors after the parent's cancellation: %v, %v", ctx.Err(), child.Err())
	}
}
