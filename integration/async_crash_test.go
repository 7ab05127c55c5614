package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/integration/countprofile"
	"github.com/sink-io/sink/integration/kafkatest"
	"github.com/sink-io/sink/integration/mongotest"
	"github.com/sink-io/sink/integration/sinktest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// A worker process (the sink binary with a counting merge profile, run with
// SINK_MODE=worker against the standalone broker and a MongoDB-wire server)
// is killed with SIGKILL while it is applying, then restarted: no accepted
// mutation is lost. Merges append their tag to the record, so mutations
// applied twice (the uncommitted part of the batch in progress at the kill)
// are counted and reported.
func TestAsyncWorkerCrashLosesNothing(t *testing.T) {
	asyncSkipShort(t)
	const (
		// FerretDB (the fallback test server) applies about 100 revision-checked
		// replaces per second: keep the volume small and the waves wide.
		records   = 100
		mutations = 1500
		batch     = 300
	)
	mongo := mongotest.Private(t)
	broker := kafkatest.StartBroker(t, kafkatest.Topics(asyncTopic, asyncDLT), kafkatest.Partitions(4))
	bin := asyncBuildSinkCount(t)
	ns := mongotest.DatabaseName(t)

	// The API: a server process (in the test process) with the same storage.
	server := sinktest.Start(t, asyncEnv([]string{broker.Addr()}, bootstrap.ModeServer, mongo.SinkEnv()), bootstrap.MergeProfile(countprofile.New))
	c := server.Client
	recAddr := func(r int) *sinkv1.RecordAddress { return addr(ns, "counters", fmt.Sprintf("c%02d", r)) }

	// Queue every mutation before the worker starts, so that it works
	// through full batches.
	for start := 0; start < mutations; start += batch {
		ops := make([]*sinkv1.WriteOperation, 0, batch)
		for i := start; i < start+batch && i < mutations; i++ {
			intent, err := countprofile.Encode(domain.ContentTypeBSON, countprofile.Intent{Add: 1, ID: fmt.Sprintf("m%05d", i)})
			if err != nil {
				t.Fatal(err)
			}
			ops = append(ops, &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{
				Address: recAddr(i % records), Profile: countprofile.Name,
				Intent: &sinkv1.Document{ContentType: intent.ContentType, Data: intent.Data}}}})
		}
		asyncMustAccept(t, c, ops...)
	}

	healthPort := kafkatest.FreePort(t)
	env := []string{
		"SINK_MODE=worker",
		// One worker at a time writes, one record's mutations one after the
		// other: FerretDB's non-atomic updates across connections (see
		// mongotest.ConcurrentURI) cannot interleave here.
		"SINK_KAFKA_BROKERS=" + broker.Addr(),
		"SINK_KAFKA_TOPIC=" + asyncTopic,
		"SINK_KAFKA_GROUP_ID=sink-workers",
		"SINK_KAFKA_SESSION_TIMEOUT=6s",
		"SINK_KAFKA_MAX_POLL_RECORDS=" + strconv.Itoa(batch),
		"SINK_HTTP_ADDRESS=127.0.0.1:" + strconv.Itoa(healthPort),
		"SINK_LOG_FORMAT=text",
		"SINK_LOG_LEVEL=info",
	}
	for k, v := range mongo.SinkEnv() {
		env = append(env, k+"="+v)
	}
	applied := func() (total int, ids map[string]int, state string) {
		ids = map[string]int{}
		ops := make([]*sinkv1.ReadOperation, records)
		for r := range ops {
			ops[r] = &sinkv1.ReadOperation{Address: recAddr(r)}
		}
		resp, err := c.Read(context.Background(), &sinkv1.ReadRequest{Operations: ops})
		if err != nil {
			return -1, nil, err.Error()
		}
		for r, res := range resp.GetResults() {
			if res.GetStatus() == notFound {
				continue
			}
			if res.GetStatus() != found {
				return -1, nil, fmt.Sprintf("record %d: %v %v", r, res.GetStatus(), res.GetError())
			}
			var doc countprofile.Counter
			d := domain.Document{ContentType: res.GetDocument().GetContentType(), Data: res.GetDocument().GetData()}
			if err := countprofile.Decode(d, &doc); err != nil {
				return -1, nil, err.Error()
			}
			if doc.N != len(doc.IDs) {
				return -1, nil, fmt.Sprintf("record %d: n=%d but %d ids", r, doc.N, len(doc.IDs))
			}
			total += doc.N
			for _, id := range doc.IDs {
				ids[id]++
			}
		}
		return total, ids, fmt.Sprintf("%d applied, %d distinct", total, len(ids))
	}

	started := time.Now()
	w1 := asyncStartProcess(t, bin, env)
	healthURL := fmt.Sprintf("http://127.0.0.1:%d/healthz", healthPort)
	eventually(t, 30*time.Second, "the first worker to apply a part of the log", func() (bool, string) {
		total, _, state := applied()
		return total >= mutations/4, state
	})
	if err := w1.kill(); err != nil {
		t.Fatal(err)
	}
	atKill, _, state := applied()
	if atKill >= mutations {
		t.Fatalf("the worker finished everything before it was killed (%s): the test proves nothing", state)
	}
	t.Logf("killed the first worker with SIGKILL %v after its start, when it had applied %d of %d mutations (%s)", time.Since(started).Round(time.Millisecond), atKill, mutations,
		map[bool]string{true: "at a batch boundary", false: "in the middle of a batch"}[atKill%batch == 0])

	restarted := time.Now()
	w2 := asyncStartProcess(t, bin, env)
	eventually(t, 30*time.Second, "the restarted worker's health endpoint", func() (bool, string) {
		code, body := httpGetQuiet(healthURL)
		return code == 200, fmt.Sprintf("%d %s", code, body)
	})
	var ids map[string]int
	var total int
	eventually(t, 120*time.Second, "every accepted mutation to be applied", func() (bool, string) {
		var state string
		total, ids, state = applied()
		return len(ids) == mutations, state
	})
	twice := 0
	for id, n := range ids {
		if !strings.HasPrefix(id, "m") {
			t.Fatalf("unknown tag %q", id)
		}
		if n > 1 {
			twice += n - 1
		}
	}
	t.Logf("%v after the restart: all %d accepted mutations applied; %d executions were duplicates (%d applications in total)",
		time.Since(restarted).Round(time.Millisecond), mutations, twice, total)
	if err := w2.term(); err != nil {
		t.Errorf("stopping the second worker: %v\n%s", err, w2.output())
	}
	if out := w2.output(); !strings.Contains(out, "stopped") {
		t.Errorf("the second worker did not stop gracefully:\n%s", out)
	}
}

var asyncBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// asyncBuildSinkCount builds integration/cmd/sinkcount once per test binary.
func asyncBuildSinkCount(t *testing.T) string {
	t.Helper()
	asyncBuild.once.Do(func() {
		asyncBuild.dir, asyncBuild.err = os.MkdirTemp("", "sinkcount-")
		if asyncBuild.err != nil {
			return
		}
		asyncBuild.bin = filepath.Join(asyncBuild.dir, "sinkcount")
		cmd := exec.Command("go", "build", "-o", asyncBuild.bin, "./integration/cmd/sinkcount")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			asyncBuild.err = fmt.Errorf("go build ./integration/cmd/sinkcount: %v\n%s", err, out)
		}
	})
	if asyncBuild.err != nil {
		t.Fatal(asyncBuild.err)
	}
	return asyncBuild.bin
}

// asyncProcess is a Sink child process.
type asyncProcess struct {
	t      *testing.T
	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{}
	err    error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func asyncStartProcess(t *testing.T, bin string, env []string) *asyncProcess {
	t.Helper()
	p := &asyncProcess{t: t, out: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin)
	p.cmd.Env = append(os.Environ(), env...)
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
