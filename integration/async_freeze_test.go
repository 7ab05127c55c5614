package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/adapters/kafka"
)

// Freeze trials: a worker process is frozen (SIGSTOP) in the middle of a
// batch for longer than its session timeout, a second worker takes its
// partitions over and applies far past the frozen batch (each record's
// applied ring moves on), then the first continues (SIGCONT) in the
// middle of its batch, with writes of mutations that the second applied
// long ago, and the second is stopped (SIGTERM). Three times, under 6,000
// merges of the non-idempotent count profile over 20 records. Afterwards:
// none lost, none applied twice, and not one dead letter (every merge was
// applied, so a dead letter could only be an applied mutation, which a
// replay would apply twice). Before the fix the woken worker dead-lettered
// mutations the other had applied as SUPERSEDED.
func TestAsyncFrozenWorkerDeadLettersNothingApplied(t *testing.T) {
	asyncSkipShort(t)
	const (
		records = 20
		cycles  = 3
		chunk   = 2000 // merges queued before each freeze
		batch   = 100  // SINK_KAFKA_MAX_POLL_RECORDS
		// How far the second worker applies past the freeze: more than
		// a ring (32) per record, so that the woken worker's late writes
		// meet marks that passed them without holding their ids.
		past = 40 * records
		// The freeze lands this long (at most) after the worker was seen
		// applying, so in the middle of a batch or between two.
		maxFreezeDelay = 300 * time.Millisecond
	)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("random seed %d", seed)
	r := newCounterRig(t, records)
	// A short session (the frozen worker is expelled within about 2 s)
	// and a long batch budget (a third of the rebalance timeout: 15 s), so
	// that the frozen worker's batch goes on when it wakes up.
	workerEnv := func() ([]string, string) {
		return r.workerEnv("info", "SINK_KAFKA_SESSION_TIMEOUT=2s", "SINK_KAFKA_REBALANCE_TIMEOUT=45s",
			"SINK_KAFKA_MAX_POLL_RECORDS="+strconv.Itoa(batch))
	}
	envA, urlA := workerEnv()
	a := asyncStartProcess(t, r.bin, envA)
	for cycle := 1; cycle <= cycles; cycle++ {
		r.queue(chunk)
		before, _, state := r.applied()
		if before < 0 {
			t.Fatalf("cycle %d: %s", cycle, state)
		}
		eventually(t, 60*time.Second, fmt.Sprintf("cycle %d: worker a to own every partition", cycle), func() (bool, string) {
			return groupMembers(r.adm, "sink-workers", "Stable", 1)
		})
		eventually(t, 60*time.Second, fmt.Sprintf("cycle %d: worker a to apply", cycle), func() (bool, string) {
			total, _, state := r.applied()
			return total > before, state
		})
		wait := time.Duration(rng.Int64N(int64(maxFreezeDelay)))
		time.Sleep(wait) // the random freeze point (not a synchronisation)
		if err := a.freeze(); err != nil {
			t.Fatal(err)
		}
		atFreeze, _, _ := r.applied()
		envB, _ := workerEnv()
		b := asyncStartProcess(t, r.bin, envB)
		eventually(t, 60*time.Second, fmt.Sprintf("cycle %d: worker b to take every partition over", cycle), func() (bool, string) {
			return groupMembers(r.adm, "sink-workers", "Stable", 1)
		})
		eventually(t, 90*time.Second, fmt.Sprintf("cycle %d: worker b to apply past the frozen batch", cycle), func() (bool, string) {
			total, _, state := r.applied()
			return total >= min(atFreeze+past, r.queued), state
		})
		if err := a.thaw(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 90*time.Second, fmt.Sprintf("cycle %d: worker a to rejoin the group", cycle), func() (bool, string) {
			return groupMembers(r.adm, "sink-workers", "Stable", 2)
		})
		if err := b.term(); err != nil {
			t.Errorf("cycle %d: stopping worker b: %v\n%s", cycle, err, b.output())
		}
		now, _, _ := r.applied()
		t.Logf("cycle %d: froze worker a %v after it applied, at %d applied; b applied to %d; %d of %d queued applied after b stopped",
			cycle, wait.Round(time.Millisecond), atFreeze, atFreeze+past, now, r.queued)
	}
	lost, twice, total := r.drainAndCount(120 * time.Second)
	t.Logf("after %d freezes: %d merges accepted, %d applications; lost: %d; applied twice: %d; worker a skipped %d as superseded",
		cycles, r.queued, total, lost, twice, workerDeduplicated(urlA, "superseded"))
	letters := r.deadLetters()
	for _, d := range letters {
		t.Errorf("dead letter of an applied mutation: %s %s: %s", d.MutationID, d.ErrorCode, d.ErrorMessage)
	}
	if len(letters) > 0 {
		// What an operator does next: replay them. Each was applied, so
		// a replay must apply none of them again.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl, err := kgo.NewClient(kgo.SeedBrokers(r.broker.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := kafka.Replay(ctx, kafka.NewPublisher(cl), asyncDLT, asyncTopic, letters); err != nil {
			t.Fatal(err)
		}
		if _, twice, _ := r.drainAndCount(60 * time.Second); twice > 0 {
			t.Errorf("the replay of %d dead letters applied %d of them a second time", len(letters), twice)
		}
	}
	if err := a.term(); err != nil {
		t.Errorf("stopping worker a: %v", err)
	}
	if out := a.output(); strings.Contains(out, "dead-lettering") {
		t.Errorf("worker a dead-lettered a mutation:\n%s", out)
	}
}

// workerDeduplicated returns the worker's count of queued mutations skipped
// for reason (duplicate or superseded; 0 when its metrics cannot be read).
func workerDeduplicated(baseURL, reason string) int {
	code, body := httpGetQuiet(baseURL + "/metrics")
	if code != 200 {
		return 0
	}
	n := 0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "sink_mutations_deduplicated_total{") && strings.Contains(line, `reason="`+reason+`"`) && strings.Contains(line, `source="worker"`) {
			if f := strings.Fields(line); len(f) == 2 {
				v, _ := strconv.ParseFloat(f[1], 64)
				n += int(v)
			}
		}
	}
	return n
}
