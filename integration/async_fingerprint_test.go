package integration_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/declarative"
	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit"
)

// A merge queued under an older definition of a declarative profile meets
// a worker with a newer one: SINK_MERGE_FINGERPRINT_POLICY=dead-letter
// sends it to the dead-letter topic, apply applies it with the new
// definition; merges queued under the current definition are applied.
func TestAsyncMergeFingerprintPolicy(t *testing.T) {
	asyncSkipShort(t)
	dir := t.TempDir()
	write := func(name, step string) string {
		p := filepath.Join(dir, name)
		src := "profiles:\n  - name: counter\n    rules: [{op: add, path: /n, value: '" + step + "'}]\n"
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	oldFile, newFile := write("old.yaml", "1"), write("new.yaml", "10")
	cfg, err := bootstrap.LoadConfig(testkit.Env())
	if err != nil {
		t.Fatal(err)
	}
	old, err := declarative.LoadFile(oldFile, cfg.MergeProfilesOptions())
	if err != nil {
		t.Fatal(err)
	}
	oldFP := old[0].Fingerprint()
	for _, policy := range []string{"dead-letter", "apply"} {
		t.Run(policy, func(t *testing.T) {
			forEachTransport(t, 1, func(t *testing.T, tr *asyncTransport) {
				s := tr.startAll(t, map[string]string{"SINK_MERGE_PROFILES_FILE": newFile, "SINK_MERGE_FINGERPRINT_POLICY": policy})
				ns := "fp-" + policy
				// Queued by a server that still had the old file.
				stale := domain.Mutation{ID: "stale-" + policy, Kind: domain.MutationMerge, SubmittedAt: time.Now(),
					Address: domain.Address{Store: "primary", Namespace: ns, Dataset: "d", Key: domain.StringKey("stale")},
					Merge:   domain.MergeIntent{Profile: "counter", Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{}`)}, Fingerprint: oldFP}}
				m, err := kafka.NewMutationMessage(stale)
				if err != nil {
					t.Fatal(err)
				}
				tr.publish(t, m)
				// Queued through this server: the current definition.
				fresh := addr(ns, "d", "fresh")
				asyncMustAccept(t, s.Client, mergeOp(fresh, "counter", `{}`))
				eventuallyState(t, s.Client, fresh, `{"n":10}`, 30*time.Second)
				staleAddr := addr(ns, "d", "stale")
				if policy == "apply" {
					eventuallyState(t, s.Client, staleAddr, `{"n":10}`, 30*time.Second)
					return
				}
				letters := tr.deadLetters(t, 1)
				var found bool
				for _, d := range letters {
					if d.MutationID == stale.ID {
						found = true
						if d.ErrorCode != "FAILED_PRECONDITION" || !strings.Contains(d.ErrorMessage, `merge profile "counter" has changed since the merge was queued (queued under definition `+oldFP) {
							t.Fatalf("dead letter %+v", d)
						}
					}
				}
				if !found {
					t.Fatalf("the stale merge is not among the dead letters %+v", letters)
				}
				eventuallyState(t, s.Client, staleAddr, "absent", time.Second)
			})
		})
	}
}
