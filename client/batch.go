package client

import (
	"context"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// Batch collects operations and runs them with as few requests as the
// server's limits allow. Build it with Client.Batch, add operations (each
// method returns the operation's index in the results), then call Do.
//
// Consecutive operations of one kind (reads; puts and merges; deletes) go
// out together, split per server and by WithLimits; the runs of different
// kinds go one after the other, so the batch keeps the order of one
// record's operations. A Batch is not safe for concurrent use.
type Batch struct {
	c          *Client
	ops        []*op
	completion Completion
}

// Batch returns an empty batch whose writes use completion mode
// WaitUntilApplied unless SetCompletion says otherwise.
func (c *Client) Batch() *Batch { return &Batch{c: c, completion: WaitUntilApplied} }

// SetCompletion sets the completion mode of the batch's writes and deletes.
func (b *Batch) SetCompletion(m Completion) *Batch { b.completion = m; return b }

// Len returns the number of operations added.
func (b *Batch) Len() int { return len(b.ops) }

func (b *Batch) add(o *op) int {
	b.ops = append(b.ops, o)
	return len(b.ops) - 1
}

// addFailed records an operation that failed before it could be sent (its
// value did not encode).
func (b *Batch) addFailed(err error) int {
	o := &op{done: true, res: Result{Status: StatusFailed, Err: err}}
	return b.add(o)
}

// Read adds a read of the record of key.
func (b *Batch) Read(d *Dataset, key Key) int { return b.add(d.readOp(key)) }

// Put adds a put (create or replace) of v under key.
func (b *Batch) Put(d *Dataset, key Key, v any, opts ...WriteOption) int {
	return b.put(d, key, v, sinkv1.PutMode_PUT_MODE_UPSERT, opts)
}

// Create adds a put of v under key that requires the record to be absent.
func (b *Batch) Create(d *Dataset, key Key, v any, opts ...WriteOption) int {
	return b.put(d, key, v, sinkv1.PutMode_PUT_MODE_CREATE, opts)
}

// Replace adds a put of v under key that requires the record to exist.
func (b *Batch) Replace(d *Dataset, key Key, v any, opts ...WriteOption) int {
	return b.put(d, key, v, sinkv1.PutMode_PUT_MODE_REPLACE, opts)
}

func (b *Batch) put(d *Dataset, key Key, v any, mode sinkv1.PutMode, opts []WriteOption) int {
	o, err := d.putOp(key, v, mode, d.options(opts))
	if err != nil {
		return b.addFailed(err)
	}
	return b.add(o)
}

// Merge adds a merge of intent into the record of key through profile.
func (b *Batch) Merge(d *Dataset, key Key, profile string, intent any, opts ...WriteOption) int {
	o, err := d.mergeOp(key, profile, intent, d.options(opts))
	if err != nil {
		return b.addFailed(err)
	}
	return b.add(o)
}

// Delete adds a delete of the record of key.
func (b *Batch) Delete(d *Dataset, key Key, opts ...WriteOption) int {
	return b.add(d.deleteOp(key, d.options(opts)))
}

// Do runs the batch and returns one result per operation, in the order
// they were added. Per-operation failures are in Result.Err; Do itself
// never fails (a canceled context fails the operations not yet final).
// A batch runs once: a second Do returns the same results.
func (b *Batch) Do(ctx context.Context) []Result {
	for start := 0; start < len(b.ops); {
		for start < len(b.ops) && b.ops[start].done {
			start++
		}
		if start == len(b.ops) {
			break
		}
		kind := b.ops[start].kind
		var run []*op
		end := start
		for ; end < len(b.ops) && (b.ops[end].done || b.ops[end].kind == kind); end++ {
			if !b.ops[end].done {
				run = append(run, b.ops[end])
			}
		}
		b.c.run(ctx, run, sinkv1.CompletionMode(b.completion))
		start = end
	}
	out := make([]Result, len(b.ops))
	for i, o := range b.ops {
		out[i] = o.res
	}
	return out
}
