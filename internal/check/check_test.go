package check

import (
	"strings"
	"testing"
	"time"
)

func TestProblemsAreReportedAtOnce(t *testing.T) {
	var p Problems
	p.Positive("A", 1)
	p.PositiveDuration("B", time.Second)
	p.NotNegative("C", 0)
	if err := p.Err(); err != nil {
		t.Fatalf("valid values: %v", err)
	}
	p.Positive("A", 0)
	p.PositiveDuration("B", -time.Second)
	p.NotNegative("C", -time.Millisecond)
	p.Add("D is %s", "odd")
	want := "A must be positive, got 0\nB must be positive, got -1s\nC must not be negative, got -1ms\nD is odd"
	if err := p.Err(); err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	if strings.Count(p.Err().Error(), "\n") != 3 {
		t.Fatal("not one line per problem")
	}
}
