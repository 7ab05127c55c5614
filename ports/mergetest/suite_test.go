package mergetest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/mergetest"
)

// echo is a small well-behaved profile: the result is the intent, which
// must be the JSON object {} or {"x":1}. defect breaks it on purpose.
type echo struct {
	defect string
	calls  *atomic.Int64
}

func (echo) Name() string           { return "echo" }
func (echo) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (e echo) Merge(ctx context.Context, in ports.MergeInput) (domain.Document, error) {
	n := e.calls.Add(1)
	if in.Current == nil && len(in.Accept) > 0 && e.defect != "ignores-accept" {
		ok := false
		for _, a := range in.Accept {
			ok = ok || domain.IsMediaType(a, domain.ContentTypeJSON)
		}
		if !ok {
			return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "echo: the store holds no JSON")
		}
	}
	for _, d := range []*domain.Document{in.Current, &in.Intent} {
		if d != nil && string(d.Data) != "{}" && string(d.Data) != `{"x":1}` {
			if e.defect == "plain-error" {
				return domain.Document{}, errors.New("bad input")
			}
			return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "echo: not an accepted document")
		}
	}
	switch e.defect {
	case "mutates":
		in.Intent.Data[0] = ' '
	case "nondeterministic":
		return domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"n":` + string(rune('0'+n%10)) + `}`)}, nil
	case "aliases":
		return domain.Document{ContentType: domain.ContentTypeJSON, Data: in.Intent.Data}, nil
	case "wrong-type":
		return domain.Document{ContentType: "text/plain", Data: []byte("{}")}, nil
	}
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: append([]byte(nil), in.Intent.Data...)}, nil
}

func features() mergetest.Features {
	js := func(s string) domain.Document {
		return domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(s)}
	}
	cur := js(`{}`)
	return mergetest.Features{
		Valid:   []mergetest.Case{{Name: "absent", Intent: js(`{"x":1}`)}, {Name: "present", Current: &cur, Intent: js(`{}`)}},
		Invalid: []mergetest.Case{{Name: "bad intent", Intent: js(`{"y":2}`)}},
	}
}

func TestSuitePassesAGoodProfile(t *testing.T) {
	mergetest.Run(t, echo{calls: new(atomic.Int64)}, features())
}

// TestBrokenProfile is run by TestSuiteCatchesDefects in a child process.
func TestBrokenProfile(t *testing.T) {
	d := os.Getenv("MERGETEST_DEFECT")
	if d == "" {
		t.Skip("run by TestSuiteCatchesDefects")
	}
	mergetest.Run(t, echo{defect: d, calls: new(atomic.Int64)}, features())
}

// TestSuiteCatchesDefects: each defect makes the suite fail with the
// subtest that names it.
func TestSuiteCatchesDefects(t *testing.T) {
	for defect, subtest := range map[string]string{
		"mutates":          "InputsNotMutated",
		"aliases":          "InputsNotMutated",
		"nondeterministic": "Deterministic",
		"ignores-accept":   "AbsentRecord",
		"plain-error":      "InvalidIntentsAreInvalidArgument",
		"wrong-type":       "ResultContentTypeDeclaredAndAccepted",
	} {
		t.Run(defect, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenProfile$", "-test.v")
			cmd.Env = append(os.Environ(), "MERGETEST_DEFECT="+defect)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a profile with defect %q:\n%s", defect, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestBrokenProfile/"+subtest) {
				t.Fatalf("defect %q: subtest %s did not fail:\n%s", defect, subtest, out)
			}
		})
	}
}
