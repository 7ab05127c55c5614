package postgres

import (
	"strconv"
	"time"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// ScanStatements returns the statements (and their arguments) Scan runs for
// q, one per key kind it reads, so tests can EXPLAIN them.
func ScanStatements(s *Store, q ports.ScanQuery) ([]string, [][]any, error) {
	t, err := s.names.resolve(domain.Address{Store: q.Dataset.Store, Namespace: q.Dataset.Namespace, Dataset: q.Dataset.Dataset, Key: domain.Int64Key(0)})
	if err != nil {
		return nil, nil, err
	}
	var sqls []string
	var argss [][]any
	for _, ks := range keySpaces(t) {
		var a args
		conds, ok, err := ks.conds(&a, q.Range, q.After, q.Descending)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			sqls = append(sqls, scanSQL(ks, conds, q.Descending, strconv.Itoa(q.Limit)))
			argss = append(argss, a)
		}
	}
	return sqls, argss, nil
}

// SetStreamIdleHook sets a function run when a streamed scan gives its
// connection back for being idle.
func SetStreamIdleHook(s *Store, f func()) { s.streamIdleHook = f }

// SetStreamStopLimit sets how long a stream waits for the server to end a
// SELECT it stops early before it closes the connection.
func SetStreamStopLimit(s *Store, d time.Duration) { s.streamStop = d }
