package kafka

import (
	"context"
	"sort"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Parking: a record (a Kafka record key: one Sink record's address) whose
// mutation keeps failing transiently delays only that record's later
// mutations. The handler marks such a message parked (markParked) before
// nacking it; the Subscriber then keeps the message's Kafka record in the
// record's queue instead of rewinding the partition, diverts the record's
// later Kafka records into the queue (offset order), emits the queue again
// after a backoff, and keeps emitting the partition's other records. A
// partition's committed offset never passes its lowest parked offset, so
// a restart or a new owner reads the parked records again (the applied
// marks skip what was applied). Parked records of partitions the member
// no longer owns are dropped (Fence). When MaxParked records are parked,
// the Subscriber stops polling new records until some are resolved.

type parkSignalKey struct{}

// markParked tells the Subscriber that emitted msg (when it supports
// parking) that the message is nacked because it is parked, not because
// it must be read again at once. It reports whether the subscriber
// supports parking; without it, the caller handles the nack as unfinished.
func markParked(msg *message.Message) bool {
	f, ok := msg.Context().Value(parkSignalKey{}).(*atomic.Bool)
	if ok {
		f.Store(true)
	}
	return ok
}

type parkKey struct {
	tp  topicPartition
	key string
}

type parkQueue struct {
	recs  []*kgo.Record // offset order
	due   time.Time
	delay time.Duration
	gen   map[topicPartition]uint64 // the partition's Fence generation when parked
}

type parking struct {
	queues map[parkKey]*parkQueue
	n      int
}

func newParking() *parking { return &parking{queues: map[parkKey]*parkQueue{}} }

func keyOf(r *kgo.Record) parkKey {
	return parkKey{topicPartition{r.Topic, r.Partition}, string(r.Key)}
}

// add parks r: it joins its record's queue in offset order. A new queue
// is due after delay; an existing one keeps its schedule unless
// reschedule (its head was delivered again and parked again).
func (p *parking) add(r *kgo.Record, gen map[topicPartition]uint64, delay time.Duration, now time.Time, reschedule bool) {
	k := keyOf(r)
	q := p.queues[k]
	if q == nil {
		q = &parkQueue{delay: delay, due: now.Add(delay), gen: gen}
		p.queues[k] = q
	} else if reschedule {
		q.delay, q.due = delay, now.Add(delay)
	}
	i := sort.Search(len(q.recs), func(i int) bool { return q.recs[i].Offset >= r.Offset })
	if i < len(q.recs) && q.recs[i].Offset == r.Offset {
		return
	}
	q.recs = append(q.recs, nil)
	copy(q.recs[i+1:], q.recs[i:])
	q.recs[i] = r
	p.n++
}

// divert parks the records of recs whose record has a queue, and returns
// the others.
func (p *parking) divert(recs []*kgo.Record) []*kgo.Record {
	if len(p.queues) == 0 {
		return recs
	}
	out := recs[:0:0]
	for _, r := range recs {
		if q := p.queues[keyOf(r)]; q != nil {
			q.recs = append(q.recs, r) // polled records come after the queue's
			p.n++
			continue
		}
		out = append(out, r)
	}
	return out
}

// takeDue takes, from the queues due at now, at most limit records (a
// queue's head first; what is left of a queue stays parked, due at once)
// and returns them with the taken queues' schedules (to keep backing off
// if they are parked again).
func (p *parking) takeDue(now time.Time, limit int) ([]*kgo.Record, map[parkKey]*parkQueue) {
	var out []*kgo.Record
	var taken map[parkKey]*parkQueue
	for k, q := range p.queues {
		if q.due.After(now) || len(out) >= limit {
			continue
		}
		if taken == nil {
			taken = map[parkKey]*parkQueue{}
		}
		taken[k] = q
		n := min(len(q.recs), limit-len(out))
		out = append(out, q.recs[:n]...)
		p.n -= n
		if n == len(q.recs) {
			delete(p.queues, k)
			continue
		}
		// The rest keeps the record's later mutations parked behind the
		// taken ones.
		q.recs = append([]*kgo.Record(nil), q.recs[n:]...)
	}
	// Offset order within each partition keeps each record's order.
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out, taken
}

// nextDue returns when the next queue is due (zero without queues).
func (p *parking) nextDue() time.Time {
	var next time.Time
	for _, q := range p.queues {
		if next.IsZero() || q.due.Before(next) {
			next = q.due
		}
	}
	return next
}

// lowest returns the lowest parked offset per partition.
func (p *parking) lowest() map[topicPartition]int64 {
	out := map[topicPartition]int64{}
	for k, q := range p.queues {
		if len(q.recs) == 0 {
			continue
		}
		if at, ok := out[k.tp]; !ok || q.recs[0].Offset < at {
			out[k.tp] = q.recs[0].Offset
		}
	}
	return out
}

// dropFrom forgets the parked records of tp at or after offset (they are
// read again after a rewind).
func (p *parking) dropFrom(tp topicPartition, offset int64) {
	for k, q := range p.queues {
		if k.tp != tp {
			continue
		}
		keep := q.recs[:0]
		for _, r := range q.recs {
			if r.Offset < offset {
				keep = append(keep, r)
			}
		}
		p.n -= len(q.recs) - len(keep)
		q.recs = keep
		if len(keep) == 0 {
			delete(p.queues, k)
		}
	}
}

// dropGone forgets the parked records of partitions the member lost since
// they were parked, and returns those partitions.
func (p *parking) dropGone(f *Fence) map[topicPartition]bool {
	var gone map[topicPartition]bool
	for k, q := range p.queues {
		if f.still(q.gen, k.tp) {
			continue
		}
		if gone == nil {
			gone = map[topicPartition]bool{}
		}
		gone[k.tp] = true
		p.n -= len(q.recs)
		delete(p.queues, k)
	}
	return gone
}

// waitCtx returns ctx bounded by the time the next parked queue is due
// (and by limit when positive).
func (p *parking) waitCtx(ctx context.Context, now time.Time, limit time.Duration) (context.Context, context.CancelFunc) {
	d := limit
	if next := p.nextDue(); !next.IsZero() {
		if until := max(next.Sub(now), time.Millisecond); d <= 0 || until < d {
			d = until
		}
	}
	if d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
