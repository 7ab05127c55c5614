package bootstrap

import (
	"fmt"
	"log/slog"

	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/declarative"
	"github.com/sink-io/sink/ports"
)

// declarativeProfiles provides the profiles of SINK_MERGE_PROFILES_FILE to
// the merge profiles group, next to the built-in and code-registered ones.
// A bad file stops start-up with every problem it has; a name the file
// shares with a built-in profile is one of them, and a name it shares with
// a code-registered profile stops start-up in application.NewService,
// which says where each of the two comes from.
func declarativeProfiles() fx.Option {
	return fx.Provide(fx.Annotate(loadDeclarativeProfiles, fx.ResultTags(`group:"merge_profiles,flatten"`)))
}

func loadDeclarativeProfiles(cfg Config, log *slog.Logger) ([]ports.MergeProfile, error) {
	if cfg.MergeProfilesFile == "" {
		return nil, nil
	}
	ps, err := declarative.LoadFile(cfg.MergeProfilesFile, cfg.MergeProfilesOptions())
	if err != nil {
		return nil, fmt.Errorf("cannot load SINK_MERGE_PROFILES_FILE: %w", err)
	}
	out := make([]ports.MergeProfile, len(ps))
	for i, p := range ps {
		out[i] = p
		log.Info("loaded merge profile", "profile", p.Name(), "fingerprint", p.Fingerprint(), "origin", p.Origin())
	}
	return out, nil
}
