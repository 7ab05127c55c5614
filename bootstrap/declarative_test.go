package bootstrap

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/fx"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit"
	"github.com/sink-io/sink/ports"
)

func writeProfiles(t *testing.T, src string) string {
	return testkit.WriteFile(t, "profiles.yaml", src)
}

// TestMergeProfilesFileEveryRole: every role loads SINK_MERGE_PROFILES_FILE
// into the same group as the built-in profile, with the configured limits.
func TestMergeProfilesFileEveryRole(t *testing.T) {
	file := writeProfiles(t, "profiles:\n  - name: counter\n    rules: [{op: add, path: /n, value: 'intent.by'}]\n")
	for _, mode := range []string{ModeServer, ModeWorker, ModeAll} {
		env := map[string]string{"SINK_MODE": mode, "SINK_MERGE_PROFILES_FILE": file, "SINK_MAX_NESTING_DEPTH": "3"}
		if mode != ModeServer {
			env["SINK_KAFKA_BROKERS"] = "127.0.0.1:1"
			env["SINK_KAFKA_TOPIC"] = "t"
			env["SINK_KAFKA_GROUP_ID"] = "g"
		}
		cfg, err := LoadConfig(env)
		if err != nil {
			t.Fatal(err)
		}
		type in struct {
			fx.In
			Profiles []ports.MergeProfile `group:"merge_profiles"`
		}
		var profiles []ports.MergeProfile
		if _, err := New(cfg, slog.New(slog.DiscardHandler), fx.Invoke(func(p in) { profiles = p.Profiles })); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		var counter ports.MergeProfile
		for _, p := range profiles {
			if p.Name() == "counter" {
				counter = p
			}
		}
		if len(profiles) != 2 || counter == nil {
			t.Fatalf("%s: profiles %v", mode, profiles)
		}
		if _, ok := counter.(ports.FingerprintedProfile); !ok {
			t.Fatalf("%s: a declarative profile has no fingerprint", mode)
		}
		got, err := counter.Merge(context.Background(), ports.MergeInput{Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"by":2}`)}})
		if err != nil || string(got.Data) != `{"n":2}` {
			t.Fatalf("%s: merge %s %v", mode, got.Data, err)
		}
		deep := domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"by":2,"x":[[[[1]]]]}`)}
		if _, err := counter.Merge(context.Background(), ports.MergeInput{Intent: deep}); err == nil || !strings.Contains(err.Error(), "nested deeper than 3 levels") {
			t.Fatalf("%s: SINK_MAX_NESTING_DEPTH does not reach the profile: %v", mode, err)
		}
	}
}

// TestMergeProfilesFileStopsStartUp: a bad file, or a name that collides
// with a built-in or code-registered profile, stops start-up with a message
// that says what and where.
func TestMergeProfilesFileStopsStartUp(t *testing.T) {
	bad := writeProfiles(t, "profiles:\n  - name: a\n    rules: [{op: nope}]\n  - name: b\n    rules: [{op: set, path: /x}]\n")
	builtin := writeProfiles(t, "profiles:\n  - name: merge-patch\n    rules: [{op: remove, path: /x}]\n")
	code := writeProfiles(t, "profiles:\n  - name: mine\n    rules: [{op: remove, path: /x}]\n")
	cases := []struct {
		file  string
		extra []fx.Option
		want  []string
	}{
		{bad, nil, []string{`profile "a": rules[0]: op: unknown operation "nope"`, `profile "b": rules[0]: value: required for set`}},
		{builtin, nil, []string{`profile "merge-patch": name: collides with the built-in profile of the same name`}},
		{code, []fx.Option{MergeProfile(func() namedProfile { return namedProfile{"mine"} })}, []string{`cannot register merge profile "mine" twice`, "bootstrap.namedProfile", "file " + code + ", line 2"}},
		{filepath.Join(t.TempDir(), "missing.yaml"), nil, []string{"cannot read merge profiles file"}},
	}
	for _, c := range cases {
		cfg, err := LoadConfig(map[string]string{"SINK_MERGE_PROFILES_FILE": c.file})
		if err != nil {
			t.Fatal(err)
		}
		_, err = New(cfg, slog.New(slog.DiscardHandler), c.extra...)
		if err == nil {
			t.Fatalf("%s: start-up did not stop", c.file)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error does not contain %q:\n%v", c.file, w, err)
			}
		}
	}
}

type namedProfile struct{ name string }

func (p namedProfile) Name() string         { return p.name }
func (namedProfile) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (namedProfile) Merge(context.Context, ports.MergeInput) (domain.Document, error) {
	return domain.Document{}, nil
}

func TestMergeFingerprintPolicyIsValidated(t *testing.T) {
	if _, err := LoadConfig(map[string]string{"SINK_MERGE_FINGERPRINT_POLICY": "ignore"}); err == nil || !strings.Contains(err.Error(), `SINK_MERGE_FINGERPRINT_POLICY must be apply or dead-letter, got "ignore"`) {
		t.Fatalf("bad policy: %v", err)
	}
	for _, ok := range []string{"apply", "dead-letter"} {
		if _, err := LoadConfig(map[string]string{"SINK_MERGE_FINGERPRINT_POLICY": ok}); err != nil {
			t.Fatalf("%s: %v", ok, err)
		}
	}
	cfg, err := LoadConfig(nil)
	if err != nil || cfg.MergeFingerprintPolicy != "apply" || cfg.MergeProfilesFile != "" {
		t.Fatalf("defaults: %+v %v", cfg, err)
	}
}

// Main hands its arguments to the sink command switch (bootstrap/cli).
func TestMainRunsCommands(t *testing.T) {
	if code := Main([]string{"profiles", "check", "../examples/profiles.yaml"}); code != 0 {
		t.Fatalf("sink profiles check: exit %d", code)
	}
	if code := Main([]string{"profiles", "check", filepath.Join(t.TempDir(), "missing.yaml")}); code != 1 {
		t.Fatalf("sink profiles check of a missing file: exit %d, want 1", code)
	}
}
