package strictjson

import (
	"strings"
	"testing"
)

type entry struct {
	Name string `json:"name"`
	N    int    `json:"n"`
}

func TestArray(t *testing.T) {
	got, err := Array[entry](`[{"name":"a","n":1},{"name":"b"}]`, "SINK_X", `{"name","n"}`)
	if err != nil || len(got) != 2 || got[0] != (entry{"a", 1}) || got[1] != (entry{Name: "b"}) {
		t.Fatalf("%+v, %v", got, err)
	}
	if got, err := Array[entry](" \n", "SINK_X", ""); got != nil || err != nil {
		t.Fatalf("blank: %+v, %v", got, err)
	}
	for in, want := range map[string]string{
		`{"name":"a"}`:                `cannot parse SINK_X: it must be a JSON array of {"name","n"} objects`,
		`[{"name":"a"},{"nmae":"b"}]`: `cannot parse SINK_X entry 1: json: unknown field "nmae"`,
		`[{"n":"x"}]`:                 `cannot parse SINK_X entry 0`,
	} {
		if _, err := Array[entry](in, "SINK_X", `{"name","n"}`); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}
