package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sink-io/sink/internal/testkit"
)

// Crash trials: a worker process (the sink binary with the non-idempotent
// "count" merge profile, run with SINK_MODE=worker against one long-lived
// standalone broker and a MongoDB-wire server, which both outlive every
// worker) is killed with SIGKILL at a random point, 20 times in a row, with
// more mutations queued before each restart; then a last worker drains the
// log. Every accepted mutation must be applied exactly once: none lost
// (every tag in the counters), none applied twice (no tag twice). Each kill
// leaves the batch in progress applied in part and uncommitted, so the
// next worker receives those mutations again; the records' applied marks
// make it skip them. The test prints both counts and fails on either.
func TestAsyncWorkerCrashTrialsEffectivelyOnce(t *testing.T) {
	asyncSkipShort(t)
	const (
		// FerretDB (the fallback test server) applies about 100
		// revision-checked replaces per second and scans the collection on
		// every write: few records, folded merges (2 per record per batch).
		records = 50
		trials  = 20
		chunk   = 100 // mutations queued before each trial
		batch   = 100 // SINK_KAFKA_MAX_POLL_RECORDS
		// The kill lands this long (at most) after the worker was seen
		// applying, so in the middle of a batch or between two.
		maxKillDelay = 400 * time.Millisecond
	)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("random seed %d", seed)

	r := newCounterRig(t, records)
	workerEnv := func(logLevel string) ([]string, string) {
		// Short group timeouts, so that the partitions of a killed worker
		// (even one killed while it was joining the group) pass to the next
		// one within seconds. A batch's time budget is a third of the
		// rebalance timeout (2 s, several batches on FerretDB); the backoff
		// must fit in it.
		return r.workerEnv(logLevel, "SINK_KAFKA_SESSION_TIMEOUT=2s", "SINK_KAFKA_REBALANCE_TIMEOUT=6s",
			"SINK_KAFKA_MAX_POLL_RECORDS="+strconv.Itoa(batch))
	}
	queue, applied, adm, bin := r.queue, r.applied, r.adm, r.bin

	started := time.Now()
	killedBusy := 0
	skipped := 0 // redeliveries the workers skipped (as far as scraped before each kill)
	for trial := 1; trial <= trials; trial++ {
		queue(chunk)
		before, _, state := applied()
		if before < 0 {
			t.Fatalf("trial %d: %s", trial, state)
		}
		env, url := workerEnv("info")
		begin := time.Now()
		w := asyncStartProcess(t, bin, env)
		// The kills land while the group is stable with the new worker
		// as its only member (the previous one's session expired before
		// it started): the kfake broker never expires a member that died
		// while its JoinGroup was pending once the leader has synced (the
		// session timer is armed only when the join response is
		// delivered), so a kill in the middle of a rebalance would leave
		// partitions with a dead owner for good. Real brokers expire it.
		eventually(t, 30*time.Second, fmt.Sprintf("worker %d to own every partition", trial), func() (bool, string) {
			return groupMembers(adm, "sink-workers", "Stable", 1)
		})
		var wait time.Duration
		how := "after it applied"
		if trial%5 == 0 {
			// Every fifth worker dies at a random moment of its first
			// poll, applied or not.
			how = "after it owned the partitions"
			wait = time.Duration(rng.Int64N(int64(maxKillDelay)))
		} else {
			eventually(t, 30*time.Second, fmt.Sprintf("worker %d to apply", trial), func() (bool, string) {
				total, _, state := applied()
				return total > before, state
			})
			wait = time.Duration(rng.Int64N(int64(maxKillDelay)))
		}
		// The random kill point (not a synchronisation).
		time.Sleep(wait)
		skipped += workerSkipped(url)
		if err := w.kill(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, fmt.Sprintf("the session of worker %d to expire", trial), func() (bool, string) {
			return groupMembers(adm, "sink-workers", "Empty", 0)
		})
		atKill, _, _ := applied()
		if atKill < r.queued {
			killedBusy++
		}
		t.Logf("trial %2d: SIGKILL %v %s, %v after its start; %d of %d queued applied", trial, wait.Round(time.Millisecond), how,
			time.Since(begin).Round(time.Millisecond), atKill, r.queued)
	}
	t.Logf("%d trials in %v, %d of the kills with work still queued", trials, time.Since(started).Round(time.Millisecond), killedBusy)
	if killedBusy < trials/2 {
		t.Errorf("only %d of %d kills found work queued: the trials did not stress redelivery", killedBusy, trials)
	}

	// A last worker drains the log.
	drain := time.Now()
	// (Its log, shown if the test fails, names every skipped redelivery.)
	env, httpURL := workerEnv("debug")
	last := asyncStartProcess(t, bin, env)
	lost, twice, total := r.drainAndCount(90 * time.Second)
	t.Logf("after %d SIGKILLs and a drain of %v: %d mutations accepted, %d applications; lost: %d; applied twice: %d",
		trials, time.Since(drain).Round(time.Millisecond), r.queued, total, lost, twice)
	skipped += workerSkipped(httpURL)
	t.Logf("the workers skipped at least %d redelivered mutations as already applied (sink_mutations_deduplicated_total)", skipped)
	if skipped == 0 {
		t.Error("no worker skipped a redelivery: no kill interrupted a batch, so the trials proved nothing")
	}
	for _, d := range r.deadLetters() {
		t.Errorf("dead letter: mutation %s %s: %s", d.MutationID, d.ErrorCode, d.ErrorMessage)
	}
	if err := last.term(); err != nil {
		t.Errorf("stopping the last worker: %v\n%s", err, last.output())
	}
	if out := last.output(); !strings.Contains(out, "stopped") {
		t.Errorf("the last worker did not stop gracefully:\n%s", out)
	}
}

// workerSkipped returns the worker's count of queued mutations skipped as
// already applied (0 when its metrics cannot be read).
func workerSkipped(baseURL string) int { return workerDeduplicated(baseURL, "duplicate") }

// groupMembers reports whether group is in state with n members.
func groupMembers(adm *kadm.Client, group, state string, n int) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gs, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return false, err.Error()
	}
	g, ok := gs[group]
	if !ok || g.Err != nil {
		return false, fmt.Sprintf("group %s not described: %v", group, g.Err)
	}
	return g.State == state && len(g.Members) == n, fmt.Sprintf("group state %s, %d members", g.State, len(g.Members))
}

// groupCaughtUp reports whether group has committed the end offset of
// every partition of topic.
func groupCaughtUp(adm *kadm.Client, group, topic string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return false, err.Error()
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		return false, err.Error()
	}
	var lag int64
	var per []string
	ends.Each(func(o kadm.ListedOffset) {
		at := int64(0)
		if c, ok := committed.Lookup(topic, o.Partition); ok {
			at = c.At
		}
		lag += o.Offset - at
		per = append(per, fmt.Sprintf("%d: %d of %d", o.Partition, at, o.Offset))
	})
	sort.Strings(per)
	return lag == 0, fmt.Sprintf("lag %d (committed per partition %s)", lag, strings.Join(per, ", "))
}

// asyncBuildSinkCount builds integration/cmd/sinkcount once per test binary.
func asyncBuildSinkCount(t *testing.T) string {
	t.Helper()
	return buildBinary(t, "./integration/cmd/sinkcount", "sinkcount")
}

// asyncProcess is a Sink child process.
type asyncProcess struct {
	t      *testing.T
	cmd    *exec.Cmd
	out    *testkit.LockedBuffer
	exited chan struct{}
	err    error
}

func asyncStartProcess(t *testing.T, bin string, env []string) *asyncProcess {
	t.Helper()
	p := &asyncProcess{t: t, out: &testkit.LockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin)
	p.cmd.Env = append(testkit.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = childProcAttr()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("output of %s (pid %d):\n%s", filepath.Base(bin), p.cmd.Process.Pid, p.out.String())
		}
	})
	return p
}

func (p *asyncProcess) output() string { return p.out.String() }

// kill sends SIGKILL and waits for the process to end.
func (p *asyncProcess) kill() error {
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("cannot kill the worker: %w", err)
	}
	<-p.exited
	return nil
}

// term sends SIGTERM and waits up to 30 s for a clean exit.
func (p *asyncProcess) term() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("cannot signal the worker: %w", err)
	}
	select {
	case <-p.exited:
		return p.err
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("the worker did not exit within 30s of SIGTERM")
	}
}

func httpGetQuiet(url string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// freeze stops the process with SIGSTOP (it keeps its sockets and state,
// as a paused container or a long stop-the-world would).
func (p *asyncProcess) freeze() error { return p.cmd.Process.Signal(syscall.SIGSTOP) }

// thaw continues a frozen process with SIGCONT.
func (p *asyncProcess) thaw() error { return p.cmd.Process.Signal(syscall.SIGCONT) }
