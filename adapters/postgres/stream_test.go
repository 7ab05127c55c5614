package postgres_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sink-io/sink/adapters/postgres"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/pgtest"
	"github.com/sink-io/sink/ports"
)

// streamFixture is a dataset of n records of about 1 KB with int64 keys
// 0..n-1.
func streamFixture(t *testing.T, s *postgres.Store, n int) domain.DatasetRef {
	return streamFixtureOf(t, s, n, 1000)
}

// streamFixtureOf is streamFixture with documents of about size bytes.
func streamFixtureOf(t *testing.T, s *postgres.Store, n, size int) domain.DatasetRef {
	t.Helper()
	d := domain.DatasetRef{Store: "primary", Namespace: "stream", Dataset: "d"}
	ops := make([]ports.WriteOp, n)
	for i := range ops {
		ops[i] = ports.WriteOp{Kind: ports.WritePut, Address: domain.Address{Store: d.Store, Namespace: d.Namespace, Dataset: d.Dataset, Key: domain.Int64Key(int64(i))},
			Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"pad":"` + strings.Repeat("x", size) + `"}`)}}
	}
	putAll(t, ctxT(t), s, ops)
	return d
}

// readStream reads st to its end in reads of n and checks that it returns
// keys from..total-1, each once, in order.
func readStream(t *testing.T, ctx context.Context, st ports.ScanStream, n, from, total int) {
	t.Helper()
	want := from
	for {
		res, err := st.Next(ctx, n)
		if err != nil {
			t.Fatalf("read after key %d: %v", want-1, err)
		}
		for _, it := range res.Items {
			if it.Key.Kind != domain.KeyInt64 || it.Key.Int64() != int64(want) {
				t.Fatalf("key %v, want %d", it.Key, want)
			}
			want++
		}
		if res.Done {
			break
		}
		if len(res.Items) == 0 {
			t.Fatal("a read returned nothing and is not done")
		}
	}
	if want != total {
		t.Fatalf("the stream ended after key %d, want %d", want-1, total-1)
	}
}

func next(t *testing.T, ctx context.Context, st ports.ScanStream, n int) {
	t.Helper()
	if res, err := st.Next(ctx, n); err != nil || len(res.Items) != n {
		t.Fatalf("read of %d: %d records, %v", n, len(res.Items), err)
	}
}

func acquired(p *pgxpool.Pool) int { return int(p.Stat().AcquiredConns()) }

// activeQueries counts the statements other sessions of the test's
// database run.
func activeQueries(t *testing.T, ctx context.Context, p *pgxpool.Pool) int {
	t.Helper()
	var n int
	err := p.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestScanStreamIdle: a stream's first read is a query (it holds no
// connection); a stream nobody reads gives its connection back
// after ScanStreamIdle (its SELECT ended on the server), and its next read
// goes on after its last key with a new SELECT.
func TestScanStreamIdle(t *testing.T) {
	p, _ := newPool(t, 4)
	s := newStore(t, p, postgres.Options{ScanStreamIdle: 50 * time.Millisecond})
	idle := make(chan struct{}, 10)
	postgres.SetStreamIdleHook(s, func() { idle <- struct{}{} })
	ctx := ctxT(t)
	const total = 5000
	d := streamFixture(t, s, total)
	st, err := s.OpenScan(ctx, ports.ScanQuery{Dataset: d, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	next(t, ctx, st, 100)
	if n := acquired(p); n != 0 {
		t.Fatalf("a stream's first read (a query) left %d connections held, want 0", n)
	}
	next(t, ctx, st, 100)
	if n := acquired(p); n != 1 {
		t.Fatalf("a stream read in part holds %d connections, want 1", n)
	}
	select {
	case <-idle:
	case <-time.After(20 * time.Second):
		t.Fatal("an idle stream kept its connection")
	}
	if n := acquired(p); n != 0 {
		t.Fatalf("an idle stream holds %d connections after its bound", n)
	}
	if n := activeQueries(t, ctx, p); n != 0 {
		t.Fatalf("%d statements still run after the idle stream ended its SELECT", n)
	}
	next(t, ctx, st, 100)
	if n := acquired(p); n != 1 {
		t.Fatalf("a stream read again holds %d connections, want 1", n)
	}
	readStream(t, ctx, st, 1000, 300, total)
	if n := acquired(p); n != 0 {
		t.Fatalf("a finished stream holds %d connections", n)
	}
}

// cancelOnWait is a context canceled as soon as something waits for it
// (context.AfterFunc calls Done): a read is under way by then.
type cancelOnWait struct {
	context.Context
	cancel context.CancelFunc
}

func (c cancelOnWait) Done() <-chan struct{} {
	go c.cancel()
	return c.Context.Done()
}

// TestScanStreamCancel: a read whose context ends (before it or while it
// reads) fails with the context's code and ends the SELECT; the
// connection goes back to the pool and stays in it (a closed one would
// leave it).
func TestScanStreamCancel(t *testing.T) {
	p, _ := newPool(t, 2)
	s := newStore(t, p, postgres.Options{ScanStreamIdle: time.Hour})
	ctx := ctxT(t)
	const total = 20_000
	d := streamFixture(t, s, total)
	for _, c := range []struct {
		name string
		ctx  func() context.Context
	}{
		{"Before", func() context.Context { c, cancel := context.WithCancel(ctx); cancel(); return c }},
		{"During", func() context.Context { c, cancel := context.WithCancel(ctx); return cancelOnWait{c, cancel} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := s.OpenScan(ctx, ports.ScanQuery{Dataset: d, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			next(t, ctx, st, 10)
			next(t, ctx, st, 10)
			conns := p.Stat().TotalConns()
			if n := acquired(p); n != 1 {
				t.Fatalf("a stream read in part holds %d connections, want 1", n)
			}
			res, err := st.Next(c.ctx(), total)
			if err == nil || domain.CodeOf(err) != domain.CodeCanceled {
				t.Fatalf("a canceled read: %d records, %v; want a canceled error", len(res.Items), err)
			}
			if n := acquired(p); n != 0 {
				t.Fatalf("a canceled stream holds %d connections", n)
			}
			if n := p.Stat().TotalConns(); n != conns {
				t.Fatalf("the pool has %d connections after the cancel, %d before: the stream's was closed", n, conns)
			}
			if n := activeQueries(t, ctx, p); n != 0 {
				t.Fatalf("%d statements still run after the cancel", n)
			}
			if n := p.Stat().TotalConns(); n != conns {
				t.Fatalf("the pool opened a connection (%d, %d before): the stream's was not usable", n, conns)
			}
		})
	}
}

// TestScanStreamPoolShare: streams hold at most ScanStreams connections
// (default half the pool); a stream that finds none free reads with a
// query per read (holding none between reads), writes still get a
// connection, and every stream returns every record once.
func TestScanStreamPoolShare(t *testing.T) {
	p, _ := newPool(t, 4)
	s := newStore(t, p, postgres.Options{ScanStreamIdle: time.Hour})
	ctx := ctxT(t)
	const total = 3000
	d := streamFixture(t, s, total)
	var streams []ports.ScanStream
	for range 3 {
		st, err := s.OpenScan(ctx, ports.ScanQuery{Dataset: d, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		next(t, ctx, st, 50)
		next(t, ctx, st, 50)
		streams = append(streams, st)
	}
	if n := acquired(p); n != 2 {
		t.Fatalf("three streams of a pool of 4 hold %d connections, want 2", n)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a := domain.Address{Store: d.Store, Namespace: d.Namespace, Dataset: d.Dataset, Key: domain.StringKey("w")}
	if r := s.Write(wctx, []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{}`)}}})[0]; r.Err != nil {
		t.Fatalf("a write beside the streams: %v", r.Err)
	}
	if r := s.Write(wctx, []ports.WriteOp{{Kind: ports.WriteDelete, Address: a}})[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	// The third reads with queries; the first two with their SELECTs.
	for i := len(streams) - 1; i >= 0; i-- {
		readStream(t, ctx, streams[i], 700, 100, total)
	}
	if n := acquired(p); n != 0 {
		t.Fatalf("finished streams hold %d connections", n)
	}
	// No streams: every read a query; a share of the whole pool: all but one.
	for _, c := range []struct{ streams, want int }{{-1, 0}, {4, 3}} {
		s := newStore(t, p, postgres.Options{ScanStreams: c.streams})
		var open []ports.ScanStream
		for range 4 {
			st, err := s.OpenScan(ctx, ports.ScanQuery{Dataset: d, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			next(t, ctx, st, 5)
			next(t, ctx, st, 5)
			open = append(open, st)
		}
		if n := acquired(p); n != c.want {
			t.Fatalf("ScanStreams %d: four streams hold %d connections, want %d", c.streams, n, c.want)
		}
		for _, st := range open {
			st.Close()
		}
	}
}

// TestScanStreamFrozenServer: a stream whose server does not answer (the
// postmaster and the streams' backends stopped) still ends a canceled
// read and Close within the stop bound: after the cancel request gets no
// answer the connection is closed (the pool drops it), and the pool serves
// again once the server does.
func TestScanStreamFrozenServer(t *testing.T) {
	srv := pgtest.Private(t)
	url := srv.NewDatabase(t)
	ctx := ctxT(t)
	admin := poolFor(t, url, 1)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	dropped := make(chan struct{}, 10)
	cfg.BeforeClose = func(*pgx.Conn) { dropped <- struct{}{} }
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	s := newStore(t, p, postgres.Options{ScanStreamIdle: time.Hour})
	postgres.SetStreamStopLimit(s, 200*time.Millisecond)
	// 80 MB to send (compressed in the table): more than the sockets
	// between client and server hold (up to 32 MiB received here), so the
	// frozen backends have not sent it all.
	const total = 10_000
	d := streamFixtureOf(t, s, total, 8000)
	open := func() ports.ScanStream {
		st, err := s.OpenScan(ctx, ports.ScanQuery{Dataset: d, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close) // before the pool's Close, which waits for its connections
		next(t, ctx, st, 10)
		next(t, ctx, st, 10)
		return st
	}
	read, closed := open(), open()
	if n := acquired(p); n != 2 {
		t.Fatalf("two streams read in part hold %d connections, want 2", n)
	}
	// The backends (each its own process group) and the postmaster.
	rows, err := admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%LIMIT ALL'`)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil || len(pids) != 2 {
		t.Fatalf("the streams' backends: %v, %v", pids, err)
	}
	signal := func(sig syscall.Signal) {
		for _, pid := range pids {
			if err := syscall.Kill(int(pid), sig); err != nil {
				t.Errorf("signal %v to backend %d: %v", sig, pid, err)
			}
		}
	}
	signal(syscall.SIGSTOP)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	frozen := true
	thaw := func() {
		if frozen {
			frozen = false
			_ = srv.Resume()
			signal(syscall.SIGCONT)
		}
	}
	defer thaw()
	rctx, cancel := context.WithCancel(ctx)
	if res, err := read.Next(cancelOnWait{rctx, cancel}, total); err == nil || domain.CodeOf(err) != domain.CodeCanceled {
		t.Fatalf("a canceled read of a frozen server: %d records (done %v), %v; want a canceled error", len(res.Items), res.Done, err)
	}
	closed.Close()
	read.Close()
	// Both connections come back closed: the pool drops them (a
	// connection a stream still held would never be dropped).
	for i := range 2 {
		select {
		case <-dropped:
		case <-time.After(20 * time.Second):
			t.Fatalf("the pool dropped %d of the frozen streams' 2 connections", i)
		}
	}
	thaw()
	st, err := s.OpenScan(ctx, ports.ScanQuery{Dataset: d, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	readStream(t, ctx, st, 1000, 0, total)
}
