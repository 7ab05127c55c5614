package postgres

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

var _ ports.ScanStreamer = (*Store)(nil)

// Streamed scans (ports.ScanStreamer), docs/postgres.md#scan-and-count.
//
// A stream's first read is a query like Scan's (a call for one page, a
// Scan with a small limit, costs no more than before). From the second
// read on, it reads the key kinds in key order as Scan does, but with one
// SELECT per kind without a LIMIT, each started as soon as the one before
// ends, on a connection of its own held for as long as a SELECT is open:
// the rows flow through all the following pages of the Scan call (the
// server fills the socket while the application sends a page). Bounds:
//   - Streams hold at most Options.ScanStreams connections of the pool at
//     once (default half of it, so that writes always have the rest); a
//     read that finds none free is a query per read, like Scan, and tries
//     again at the next read.
//   - A stream that nobody reads for Options.ScanStreamIdle (a client that
//     does not take its pages) ends its SELECT and gives its connection
//     back; its next read starts a new SELECT after its last key.
//   - A read whose context ends, and Close, end the SELECT with a cancel
//     request and read what was in flight, so the connection goes back to
//     the pool healthy; a server that does not answer within 5 seconds
//     has the connection closed instead.

// Stream defaults.
const (
	DefaultScanStreamIdle = 2 * time.Second
	// defaultStopLimit bounds the end of a SELECT that a stream stops
	// early (Store.streamStop).
	defaultStopLimit = 5 * time.Second
)

// OpenScan implements ports.ScanStreamer. It checks the dataset's table;
// the first Next starts reading.
func (s *Store) OpenScan(ctx context.Context, q ports.ScanQuery) (ports.ScanStream, error) {
	if err := ctx.Err(); err != nil {
		return nil, s.classify(ctx, err, phaseRead)
	}
	t, exists, err := s.scanTarget(ctx, q.Dataset)
	if err != nil {
		return nil, err
	}
	q.Limit = 0
	return &scanStream{s: s, t: t, q: q, spaces: scanSpaces(t, q.Descending), done: !exists}, nil
}

// scanStream is an open streamed scan.
type scanStream struct {
	s *Store
	t target
	// q: the scan; q.After is the last key returned.
	q      ports.ScanQuery
	spaces []keySpace

	mu sync.Mutex
	// si: the key space the open SELECT reads (those before it are
	// exhausted); done: every record was returned; closed: Close was called.
	si     int
	done   bool
	closed bool
	// The open SELECT (conn nil: none), the stream slot it holds, and
	// whether the SELECT of space si was started at all.
	conn    *pgxpool.Conn
	rows    pgx.Rows
	started bool
	// reads counts the reads; gen counts reads and Close, so that an idle
	// timer armed before one does not end the SELECT after it; idle is the
	// armed timer.
	reads int
	gen   uint64
	idle  *time.Timer
	arena arena
}

// Next implements ports.ScanStream.
func (st *scanStream) Next(ctx context.Context, n int) (ports.ScanResult, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.disarm()
	switch {
	case st.closed:
		return ports.ScanResult{}, domain.Errorf(domain.CodeInternal, "the scan of %s was closed", st.q.Dataset)
	case st.done:
		return ports.ScanResult{Done: true}, nil
	case n < 1:
		return ports.ScanResult{}, invalidArg("scan limit must be at least 1")
	}
	if err := ctx.Err(); err != nil {
		st.stop()
		return ports.ScanResult{}, st.s.classify(ctx, err, phaseRead)
	}
	ctx, span := st.s.startSpan(ctx, "scan", n)
	if span != nil {
		defer span.End()
	}
	first := st.reads == 0
	st.reads++
	if st.conn == nil && (first || !st.live(ctx)) {
		// The first read, or no stream slot free: a query for this read.
		// A call that reads one page (a Scan with a small limit) never
		// starts a SELECT it would have to cancel.
		q := st.q
		q.Limit = n
		res, err := st.s.Scan(ctx, q)
		if err != nil {
			return ports.ScanResult{}, err
		}
		st.returned(res.Items)
		st.done = res.Done
		return res, nil
	}
	res, err := st.read(ctx, n)
	if err != nil {
		return ports.ScanResult{}, err
	}
	st.returned(res.Items)
	if st.conn != nil {
		gen := st.gen
		st.idle = time.AfterFunc(st.s.streamIdle, func() { st.expire(gen) })
	}
	return res, nil
}

// returned records the last key of items as the stream's position.
func (st *scanStream) returned(items []ports.ScanItem) {
	if len(items) > 0 {
		k := items[len(items)-1].Key
		st.q.After = &k
	}
}

// live takes a stream slot and a connection for the stream's SELECTs; it
// reports false, holding neither, when no slot is free or no connection
// comes within ctx (the read then queries as Scan does, which waits for a
// connection in its turn).
func (st *scanStream) live(ctx context.Context) bool {
	select {
	case st.s.streamSlots <- struct{}{}:
	default:
		return false
	}
	c, err := st.s.pool.Acquire(ctx)
	if err != nil {
		<-st.s.streamSlots
		return false
	}
	st.conn, st.started = c, false
	return true
}

// read reads up to n records from the stream's SELECTs, starting the next
// kind's when one ends. The connection goes back when the last one ends,
// or with an error.
func (st *scanStream) read(ctx context.Context, n int) (ports.ScanResult, error) {
	// The read's context ends the SELECT with a cancel request (pgx
	// watches the context of Query for the whole life of the rows, so the
	// SELECT runs under no context of a read).
	var state atomic.Int32 // 0 reading, 1 finished, 2 canceled
	var severed atomic.Bool
	pc := st.conn.Conn().PgConn()
	canceled, readDone := make(chan struct{}), make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		defer close(canceled)
		if !state.CompareAndSwap(0, 2) {
			return
		}
		cctx, cancel := context.WithTimeout(context.Background(), st.s.streamStop)
		defer cancel()
		_ = pc.CancelRequest(cctx)
		select {
		case <-readDone:
		case <-cctx.Done():
			// The server does not end the statement: fail the read
			// (pgx then closes the connection).
			severed.Store(true)
			_ = pc.Conn().SetDeadline(time.Unix(1, 0))
		}
	})
	items := make([]ports.ScanItem, 0, min(n, 1024))
	var bad, err error
	for len(items) < n && err == nil && bad == nil {
		if !st.started {
			if st.si >= len(st.spaces) {
				break
			}
			sql, a, ok, serr := st.spaces[st.si].scanStatement(st.q, "ALL")
			if serr != nil {
				err = serr
				break
			}
			if !ok {
				st.si++
				continue
			}
			// q.After is the last key returned: a key of this kind when
			// the stream resumes, else one of a kind before it (or none),
			// which leaves every key of this kind.
			st.rows, err = st.conn.Query(context.Background(), sql, a...)
			if err != nil {
				st.rows = nil
				break
			}
			st.started = true
		}
		var stopped bool
		stopped, err = readRows(st.t, st.rows, &st.arena, func(id []byte, r *row) bool {
			if it, ok := scanItem(st.t, id, r, &bad); ok {
				items = append(items, it)
			}
			return len(items) < n && bad == nil
		})
		if !stopped {
			// The SELECT ended (or failed): the rows are closed.
			st.rows.Close()
			st.rows, st.started = nil, false
			if err == nil {
				st.si++
			}
		}
	}
	finished := state.CompareAndSwap(0, 1)
	close(readDone)
	if !stopWatch() {
		<-canceled
	}
	if severed.Load() {
		// The socket can no longer be read: the connection goes back
		// closed (the pool drops it).
		_ = pc.Close(context.Background())
		if st.rows != nil {
			st.rows.Close()
			st.rows = nil
		}
	}
	if err == nil {
		err = bad
	}
	switch {
	case err != nil && missingTable(err):
		st.s.forget([]*group{{t: st.t}})
		st.stop()
		st.done = true
		return ports.ScanResult{Items: items, Done: true}, nil
	case err != nil:
		st.stop()
		if _, ok := err.(*domain.Error); ok {
			return ports.ScanResult{}, err
		}
		return ports.ScanResult{}, st.s.readError(ctx, err, st.t)
	case !finished:
		// The context ended as the read finished: the SELECT is being
		// canceled; the next read starts another.
		st.stop()
	case st.si >= len(st.spaces):
		st.stop()
		st.done = true
	}
	return ports.ScanResult{Items: items, Done: st.done}, nil
}

// expire ends the SELECT of a stream not read since read gen, giving its
// connection back (the next read starts another after the last key).
func (st *scanStream) expire(gen uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.gen != gen || st.conn == nil {
		return
	}
	st.idle = nil
	st.stop()
	if h := st.s.streamIdleHook; h != nil {
		h()
	}
}

// stop ends the open SELECT, if any, and gives the connection and the
// slot back: a SELECT still running is canceled on the server and what
// was in flight is read, so the connection stays usable; one that does
// not end within streamStop closes the connection (the pool then drops it).
func (st *scanStream) stop() {
	if st.conn == nil {
		return
	}
	if st.rows != nil {
		pc := st.conn.Conn().PgConn()
		ctx, cancel := context.WithTimeout(context.Background(), st.s.streamStop)
		broken := make(chan struct{})
		stopDeadline := context.AfterFunc(ctx, func() {
			defer close(broken)
			_ = pc.Conn().SetDeadline(time.Unix(1, 0))
		})
		_ = pc.CancelRequest(ctx)
		st.rows.Close()
		if !stopDeadline() {
			<-broken
			// The deadline may have come after the rows ended: close the
			// connection, whose socket can no longer be read.
			_ = pc.Close(context.Background())
		}
		cancel()
		st.rows = nil
	}
	st.started = false
	st.conn.Release()
	st.conn = nil
	<-st.s.streamSlots
}

// disarm stops the idle timer and makes one that already fired a no-op
// (its generation is gone). st.mu is held.
func (st *scanStream) disarm() {
	st.gen++
	if st.idle != nil {
		st.idle.Stop()
		st.idle = nil
	}
}

// Close implements ports.ScanStream.
func (st *scanStream) Close() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.disarm()
	st.stop()
	st.closed = true
}
