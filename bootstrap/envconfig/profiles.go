package envconfig

import (
	"github.com/sink-io/sink/adapters/declarative"
	"github.com/sink-io/sink/adapters/mergepatch"
)

// MergeProfilesOptions are the options to load a declarative merge profiles
// file with (declarative.LoadFile), as the server loads
// SINK_MERGE_PROFILES_FILE: the configured nesting depth and document size,
// and the names of the built-in profiles refused.
func (c Config) MergeProfilesOptions() declarative.Options {
	return declarative.Options{
		Limits:   declarative.Limits{MaxDepth: c.MaxNestingDepth, MaxDocumentBytes: c.MaxDocumentBytes},
		Reserved: map[string]string{mergepatch.Name: "built-in"},
	}
}
