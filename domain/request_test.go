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
