package heapfloor

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// goal is the Go runtime's heap goal for a percentage (runtime/mgcpacer.go).
func goal(p int, live, roots uint64) uint64 {
	return max(live+(live+roots)*uint64(p)/100, heapMinimum*uint64(p)/100)
}

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name              string
		floor             uint64
		base              int
		live, roots, want uint64
	}{
		{"small heap: the 4 MiB minimum scaled to the floor", 16 * mib, 100, 1 * mib, 1 * mib, 400},
		{"the live heap and roots bound it first", 16 * mib, 100, 3 * mib, 1 * mib, 325},
		{"no collection yet", 16 * mib, 100, 0, 0, 400},
		{"base already reaches the floor", 16 * mib, 100, 10 * mib, 0, 100},
		{"live heap past the floor", 16 * mib, 100, 20 * mib, 0, 100},
		{"a higher base is kept", 16 * mib, 500, 1 * mib, 0, 500},
		{"a higher base, raised further", 64 * mib, 500, 1 * mib, 0, 1600},
	} {
		if got := Percent(c.floor, c.base, c.live, c.roots); uint64(got) != c.want {
			t.Errorf("%s: Percent(%d, %d, %d, %d) = %d, want %d", c.name, c.floor, c.base, c.live, c.roots, got, c.want)
		}
	}
	if got := Percent(16*mib, -1, mib, mib); got != -1 {
		t.Errorf("collector off: Percent = %d, want -1", got)
	}
	if got := Percent(0, 100, mib, mib); got != 100 {
		t.Errorf("floor 0: Percent = %d, want 100", got)
	}
}

// Percent's goal never passes the floor unless base's own goal does, and
// one point more would pass it (it is as close as it can be).
func TestPercentGoalAtTheFloor(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		floor := r.Uint64N(1 << 30)
		live, roots := r.Uint64N(1<<30), r.Uint64N(1<<26)
		base := 50 + r.IntN(400)
		p := Percent(floor, base, live, roots)
		switch {
		case p < base:
			t.Fatalf("Percent(%d, %d, %d, %d) = %d, below base", floor, base, live, roots, p)
		case p > base && goal(p, live, roots) > floor:
			t.Fatalf("Percent(%d, %d, %d, %d) = %d: goal %d past the floor", floor, base, live, roots, p, goal(p, live, roots))
		case goal(p+1, live, roots) <= floor && p < 1<<30:
			t.Fatalf("Percent(%d, %d, %d, %d) = %d: %d's goal %d is still within the floor", floor, base, live, roots, p, p+1, goal(p+1, live, roots))
		}
	}
}

// The tuner raises the percentage for a small heap, goes back to the
// base one after a collection finds a live heap past the floor, and
// restores the base when stopped.
func TestStart(t *testing.T) {
	base := int(read(gogc)[0].Value.Uint64())
	if base != 100 {
		t.Skipf("GOGC is %d here; the test expects the default", base)
	}
	adjustedC := make(chan int, 16)
	adjusted = func(p int) {
		select {
		case adjustedC <- p:
		default:
		}
	}
	defer func() { adjusted = func(int) {} }()
	awaitAdjust := func() int {
		t.Helper()
		select {
		case p := <-adjustedC:
			return p
		case <-time.After(30 * time.Second): // a failure guard
			t.Fatal("no adjustment after a collection")
			return 0
		}
	}

	const floor = 16 << 20
	stop := Start(floor)
	if p := current(); p <= base {
		t.Fatalf("after Start with a small heap the percentage is %d, want more than %d", p, base)
	}
	if again := Start(floor); again == nil {
		t.Fatal("a second Start returned no stop function")
	} else {
		again() // does nothing: the first tuner still runs
	}
	runtime.GC()
	awaitAdjust()
	if g := read("/gc/heap/goal:bytes")[0].Value.Uint64(); g > floor || g < floor/2 {
		t.Errorf("heap goal %d MiB with a floor of %d MiB", g>>20, floor>>20)
	}

	keep := make([][]*int, 0, 256) // 16 MiB live, with pointers to mark: GOGC=100 alone passes the floor
	for len(keep) < cap(keep) {
		keep = append(keep, make([]*int, 8<<10))
	}
	for drained := false; !drained; {
		select {
		case <-adjustedC:
		default:
			drained = true
		}
	}
	runtime.GC()
	if p := awaitAdjust(); p != base {
		t.Errorf("with %d MiB live the tuner set %d, want the base %d", read(live)[0].Value.Uint64()>>20, p, base)
	}
	runtime.KeepAlive(keep)
	keep = nil

	stop()
	if p := current(); p != base {
		t.Errorf("after stop the percentage is %d, want %d", p, base)
	}
	runtime.GC() // the live heap small again
	if next := Start(floor); current() <= base {
		t.Error("a Start after stop did not tune")
	} else {
		next()
	}
}

func current() int { return int(read(gogc)[0].Value.Uint64()) }

func TestPercentHugeFloor(t *testing.T) {
	if p := Percent(^uint64(0), 100, 1<<20, 1<<20); p <= 100 || p > 1<<30 {
		t.Errorf("Percent with the largest floor = %d", p)
	}
}
