package bootstrap

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/fx"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// SINK_MAX_NESTING_DEPTH is validated and reaches the merge-patch profile.
func TestMaxNestingDepthReachesMergePatch(t *testing.T) {
	for _, bad := range []string{"0", "10001"} {
		_, err := LoadConfig(map[string]string{"SINK_MAX_NESTING_DEPTH": bad})
		if err == nil || !strings.Contains(err.Error(), "SINK_MAX_NESTING_DEPTH must be") {
			t.Fatalf("SINK_MAX_NESTING_DEPTH=%s: %v", bad, err)
		}
	}
	cfg, err := LoadConfig(map[string]string{"SINK_MAX_NESTING_DEPTH": "5"})
	if err != nil {
		t.Fatal(err)
	}
	type in struct {
		fx.In
		Profiles []ports.MergeProfile `group:"merge_profiles"`
	}
	var profiles []ports.MergeProfile
	if _, err := New(cfg, slog.New(slog.DiscardHandler), fx.Invoke(func(p in) { profiles = p.Profiles })); err != nil {
		t.Fatal(err)
	}
	if len(profiles) != 1 || profiles[0].Name() != "merge-patch" {
		t.Fatalf("profiles %v", profiles)
	}
	nest := func(levels int) domain.Document {
		return domain.Document{ContentType: domain.ContentTypeJSON,
			Data: []byte(strings.Repeat(`{"a":`, levels) + `{}` + strings.Repeat(`}`, levels))}
	}
	if _, err := profiles[0].Merge(context.Background(), ports.MergeInput{Intent: nest(5)}); err != nil {
		t.Fatalf("5 levels: %v", err)
	}
	_, err = profiles[0].Merge(context.Background(), ports.MergeInput{Intent: nest(6)})
	if domain.CodeOf(err) != domain.CodeInvalidArgument || !strings.Contains(err.Error(), "nesting depth exceeds 5 levels") {
		t.Fatalf("6 levels: %v", err)
	}
}
