package kafkatest_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sink-io/sink/internal/testkit/kafkatest"
)

// kfake's minimum group session timeout.
const sessionTimeout = 6 * time.Second

// newClient returns a kgo client that is closed at the end of the test.
func newClient(t testing.TB, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{
		kgo.SeedBrokers(addrs...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.SessionTimeout(sessionTimeout),
		kgo.HeartbeatInterval(time.Second),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// groupConsumer returns a consumer group member that starts at the earliest
// offset when the group has no commit and commits only explicitly.
func groupConsumer(t testing.TB, addrs []string, group, topic string) *kgo.Client {
	t.Helper()
	return newClient(t, addrs,
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
}

// pollN polls until n records arrived (failing the test at ctx's deadline or
// on a fetch error) and returns them; maxPoll bounds each PollRecords call.
// If commit is true, each polled batch is committed with CommitRecords.
func pollN(ctx context.Context, t testing.TB, cl *kgo.Client, n, maxPoll int, commit bool) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for len(out) < n {
		fetches := cl.PollRecords(ctx, maxPoll)
		if err := ctx.Err(); err != nil {
			t.Fatalf("polled %d of %d records before %v", len(out), n, err)
		}
		for _, fe := range fetches.Errors() {
			t.Fatalf("fetch error on %s/%d: %v", fe.Topic, fe.Partition, fe.Err)
		}
		recs := fetches.Records()
		if len(recs) > maxPoll {
			t.Fatalf("PollRecords(%d) returned %d records", maxPoll, len(recs))
		}
		if commit && len(recs) > 0 {
			if err := cl.CommitRecords(ctx, recs...); err != nil {
				t.Fatalf("CommitRecords: %v", err)
			}
		}
		out = append(out, recs...)
	}
	if len(out) != n {
		t.Fatalf("polled %d records, want exactly %d", len(out), n)
	}
	return out
}

// committedOffsets asks the group coordinator for the group's committed
// offsets on topic (partition -> offset; -1 means no commit).
func committedOffsets(ctx context.Context, t testing.TB, cl *kgo.Client, group, topic string, partitions int) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for p := range partitions {
		rt.Partitions = append(rt.Partitions, int32(p))
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("OffsetFetch: %v", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		t.Fatalf("OffsetFetch: %v", err)
	}
	topics := resp.Topics
	if len(topics) == 0 && len(resp.Groups) == 1 { // v8+ shape
		if err := kerr.ErrorForCode(resp.Groups[0].ErrorCode); err != nil {
			t.Fatalf("OffsetFetch: %v", err)
		}
		for _, gt := range resp.Groups[0].Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = gt.Topic
			for _, gp := range gt.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = gp.Partition, gp.Offset, gp.ErrorCode
				rt.Partitions = append(rt.Partitions, rp)
			}
			topics = append(topics, rt)
		}
	}
	out := make(map[int32]int64)
	for _, rt := range topics {
		if rt.Topic != topic {
			continue
		}
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("OffsetFetch %s/%d: %v", topic, rp.Partition, err)
			}
			out[rp.Partition] = rp.Offset
		}
	}
	return out
}

// (a) In-process: 1,000 records produced in one batched ProduceSync with
// acks=all come back exactly once, in partition order, through a consumer
// group that polls at most 500 at a time and commits explicitly.
func TestInProcessProduceConsumeGroup(t *testing.T) {
	const (
		topic      = "inproc-events"
		group      = "inproc-group"
		n          = 1000
		partitions = 3
	)
	addrs := kafkatest.InProcess(t, kafkatest.Topics(topic), kafkatest.Partitions(partitions))
	if len(addrs) != 1 {
		t.Fatalf("InProcess returned %v, want one broker", addrs)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	prod := newClient(t, addrs, kgo.DefaultProduceTopic(topic))
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%17), Value: fmt.Appendf(nil, "value-%04d", i)}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("ProduceSync: %v", err)
	}
	hwm := make(map[int32]int64) // partition -> offset after the last record
	for _, r := range recs {
		hwm[r.Partition] = max(hwm[r.Partition], r.Offset+1)
	}
	var total int64
	for _, o := range hwm {
		total += o
	}
	if total != n {
		t.Fatalf("produced offsets cover %d records, want %d (%v)", total, n, hwm)
	}

	cons := groupConsumer(t, addrs, group, topic)
	got := pollN(ctx, t, cons, n, 500, true)

	seen := make(map[string]bool, n)
	last := make(map[int32]int64)
	for _, r := range got {
		if r.Topic != topic {
			t.Fatalf("record from topic %q", r.Topic)
		}
		v := string(r.Value)
		if seen[v] {
			t.Fatalf("duplicate record %q", v)
		}
		seen[v] = true
		if prev, ok := last[r.Partition]; ok && r.Offset != prev+1 {
			t.Fatalf("partition %d: offset %d after %d", r.Partition, r.Offset, prev)
		}
		last[r.Partition] = r.Offset
	}
	for i := range n {
		if v := fmt.Sprintf("value-%04d", i); !seen[v] {
			t.Fatalf("record %q never consumed", v)
		}
	}

	got2 := committedOffsets(ctx, t, cons, group, topic, partitions)
	if !maps.Equal(got2, hwm) {
		t.Fatalf("committed offsets %v, want the high watermarks %v", got2, hwm)
	}
}

// restartCase produces 200 records to two partitions, has a group consume
// them and commit offset 60 on each partition, restarts the broker with
// halt, and checks that records, high watermarks and commits all survived.
func restartCase(t *testing.T, halt func(*kafkatest.Broker) error) {
	const (
		topic      = "durable"
		group      = "durable-group"
		n          = 200
		partitions = 2
		commitAt   = 60
	)
	b := kafkatest.StartBroker(t, kafkatest.Topics(topic), kafkatest.Partitions(partitions))
	addrs := []string{b.Addr()}
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()

	value := func(i int) string { return fmt.Sprintf("durable-%03d", i) }
	prod := newClient(t, addrs, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Partition: int32(i % partitions), Value: []byte(value(i))}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("ProduceSync: %v", err)
	}
	for i, r := range recs {
		if want := int64(i / partitions); r.Offset != want {
			t.Fatalf("record %d at offset %d, want %d", i, r.Offset, want)
		}
	}
	prod.Close()

	cons := groupConsumer(t, addrs, group, topic)
	var upTo []*kgo.Record
	for _, r := range pollN(ctx, t, cons, n, 500, false) {
		if r.Offset < commitAt {
			upTo = append(upTo, r)
		}
	}
	if err := cons.CommitRecords(ctx, upTo...); err != nil {
		t.Fatalf("CommitRecords: %v", err)
	}
	want := map[int32]int64{0: commitAt, 1: commitAt}
	if got := committedOffsets(ctx, t, cons, group, topic, partitions); !maps.Equal(got, want) {
		t.Fatalf("committed offsets before restart %v, want %v", got, want)
	}
	cons.Close() // leaves the group, so a new member joins at once later

	if err := halt(b); err != nil {
		t.Fatalf("halting broker: %v", err)
	}
	if err := b.Start(); err != nil {
		t.Fatalf("restarting broker: %v", err)
	}

	// The commits survived.
	admin := newClient(t, addrs)
	if got := committedOffsets(ctx, t, admin, group, topic, partitions); !maps.Equal(got, want) {
		t.Fatalf("committed offsets after restart %v, want %v", got, want)
	}

	// Every record survived, at its offset.
	reader := newClient(t, addrs, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for _, r := range pollN(ctx, t, reader, n, 500, false) {
		i := int(r.Offset)*partitions + int(r.Partition)
		if string(r.Value) != value(i) {
			t.Fatalf("partition %d offset %d holds %q, want %q", r.Partition, r.Offset, r.Value, value(i))
		}
	}
	reader.Close()

	// The group resumes at the committed offsets.
	resumed := groupConsumer(t, addrs, group, topic)
	perPartition := make(map[int32]int)
	for _, r := range pollN(ctx, t, resumed, n-partitions*commitAt, 500, false) {
		if r.Offset < commitAt {
			t.Fatalf("group re-consumed partition %d offset %d below its commit %d", r.Partition, r.Offset, commitAt)
		}
		perPartition[r.Partition]++
	}
	if want := map[int32]int{0: n/partitions - commitAt, 1: n/partitions - commitAt}; !maps.Equal(perPartition, want) {
		t.Fatalf("group resumed with %v records per partition, want %v", perPartition, want)
	}
	resumed.Close()

	// Producing continues at the old high watermarks.
	prod2 := newClient(t, addrs, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	more := []*kgo.Record{{Partition: 0, Value: []byte("after-0")}, {Partition: 1, Value: []byte("after-1")}}
	if err := prod2.ProduceSync(ctx, more...).FirstErr(); err != nil {
		t.Fatalf("ProduceSync after restart: %v", err)
	}
	for _, r := range more {
		if r.Offset != n/partitions {
			t.Fatalf("record produced after restart to partition %d got offset %d, want %d", r.Partition, r.Offset, n/partitions)
		}
	}
}

// (b) A clean stop (SIGTERM: kfake's Close flushes and fsyncs) keeps records,
// high watermarks and committed offsets.
func TestBrokerCleanStopKeepsRecordsAndCommits(t *testing.T) {
	restartCase(t, (*kafkatest.Broker).Stop)
}

// (c) SIGKILL keeps them too: kfake writes each produced batch and each
// offset commit to the data dir (write(2), no fsync) before it answers, so
// only an OS crash, not a process crash, can lose acknowledged data.
func TestBrokerKillKeepsRecordsAndCommits(t *testing.T) {
	restartCase(t, (*kafkatest.Broker).Kill)
}

// Topics that clients auto-create survive a SIGKILL as well (kfakebroker
// persists them before kfake creates them; kfake alone would not).
func TestBrokerKillKeepsAutoCreatedTopics(t *testing.T) {
	const topic = "auto-created"
	b := kafkatest.StartBroker(t, kafkatest.Partitions(2))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prod := newClient(t, []string{b.Addr()}, kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
	recs := make([]*kgo.Record, 50)
	for i := range recs {
		recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "auto-%02d", i)}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("ProduceSync: %v", err)
	}
	prod.Close()
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	// No AllowAutoTopicCreation here: the topic must exist already.
	reader := newClient(t, []string{b.Addr()}, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := make(map[string]bool)
	parts := make(map[int32]bool)
	for _, r := range pollN(ctx, t, reader, len(recs), 500, false) {
		got[string(r.Value)] = true
		parts[r.Partition] = true
	}
	for _, r := range recs {
		if !got[string(r.Value)] {
			t.Fatalf("record %q lost", r.Value)
		}
	}
	if len(parts) > 2 {
		t.Fatalf("records in partitions %v, want the 2 of Partitions(2)", parts)
	}
}

// recoveringProducerOpts are the producer options with which one kgo.Client
// fails fast while the broker is down and produces again soon after it is
// back (measured: error after ~2 s, first success < 150 ms after READY).
func recoveringProducerOpts() []kgo.Opt {
	return []kgo.Opt{
		// The first produce after the broker went away is written to the
		// old, dead connection, so the idempotent producer treats it as
		// in flight and by default never fails it (ignoring both the
		// context and RecordDeliveryTimeout) until the broker answers: see
		// TestIdempotentProduceBlocksThroughOutage. This option lets it fail.
		kgo.AllowIdempotentProduceCancellation(),
		// Fail records after 2 s instead of retrying forever; without it
		// the error comes only at the next retry after the context ends.
		kgo.RecordDeliveryTimeout(2 * time.Second),
		// Re-dial and re-request metadata quickly once the broker is back
		// (defaults: backoff growing to 1 s, metadata at most every 5 s,
		// which makes recovery take ~5 s).
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
		kgo.MetadataMinAge(100 * time.Millisecond),
	}
}

// (d) While the broker is down a producer gets an error within a bounded
// time; once it is back the same client produces again.
func TestProducerRecoversAfterRestart(t *testing.T) {
	const topic = "recover"
	b := kafkatest.StartBroker(t, kafkatest.Topics(topic))
	opts := append([]kgo.Opt{kgo.DefaultProduceTopic(topic)}, recoveringProducerOpts()...)
	cl := newClient(t, []string{b.Addr()}, opts...)

	produce := func(timeout time.Duration, v string) (*kgo.Record, error) {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		r := &kgo.Record{Value: []byte(v)}
		return r, cl.ProduceSync(ctx, r).FirstErr()
	}
	if _, err := produce(10*time.Second, "before"); err != nil {
		t.Fatalf("produce before outage: %v", err)
	}

	wantOffset := int64(1)
	for _, step := range []struct {
		name string
		halt func() error
	}{{"stop", b.Stop}, {"kill", b.Kill}} {
		if err := step.halt(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		const bound = 5 * time.Second
		start := time.Now()
		_, err := produce(3*time.Second, "during-"+step.name)
		took := time.Since(start)
		if err == nil {
			t.Fatalf("%s: produce to a stopped broker succeeded", step.name)
		}
		if took > bound {
			t.Fatalf("%s: produce error took %v, want <= %v", step.name, took, bound)
		}
		t.Logf("%s: produce while down failed after %v: %v", step.name, took.Round(time.Millisecond), err)

		if err := b.Start(); err != nil {
			t.Fatalf("%s: restart: %v", step.name, err)
		}
		restarted := time.Now()
		deadline := restarted.Add(20 * time.Second)
		for attempt := 1; ; attempt++ {
			r, err := produce(3*time.Second, "after-"+step.name)
			if err == nil {
				if r.Offset != wantOffset {
					t.Fatalf("%s: record after restart at offset %d, want %d (the failed record must not have been written)", step.name, r.Offset, wantOffset)
				}
				wantOffset++
				t.Logf("%s: same client produced again %v after READY (attempt %d)", step.name, time.Since(restarted).Round(time.Millisecond), attempt)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: client did not recover within 20s; last error: %v", step.name, err)
			}
			t.Logf("%s: attempt %d after restart failed: %v", step.name, attempt, err)
		}
	}
}

// With kgo's defaults (idempotent producer), a ProduceSync issued while the
// broker is down does not return at its context deadline: the request went
// out on the dead connection, so the record's fate is unknown and kgo waits.
// Once the broker is back the record is delivered, exactly once.
func TestIdempotentProduceBlocksThroughOutage(t *testing.T) {
	const topic = "blocked"
	b := kafkatest.StartBroker(t, kafkatest.Topics(topic))
	cl := newClient(t, []string{b.Addr()}, kgo.DefaultProduceTopic(topic),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
		kgo.MetadataMinAge(100*time.Millisecond))
	first := &kgo.Record{Value: []byte("first")}
	if err := cl.ProduceSync(t.Context(), first).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	stuck := &kgo.Record{Value: []byte("during")}
	done := make(chan error, 1)
	go func() { done <- cl.ProduceSync(ctx, stuck).FirstErr() }()
	select {
	case err := <-done:
		t.Fatalf("ProduceSync returned while the broker was down (err %v); kgo's in-flight semantics changed", err)
	case <-time.After(2 * time.Second): // its 1 s context is long over
	}

	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("blocked ProduceSync failed after restart: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("blocked ProduceSync did not finish within 15s of the restart")
	}
	if stuck.Offset != 1 {
		t.Fatalf("blocked record landed at offset %d, want 1", stuck.Offset)
	}
	next := &kgo.Record{Value: []byte("next")}
	if err := cl.ProduceSync(t.Context(), next).FirstErr(); err != nil || next.Offset != 2 {
		t.Fatalf("produce after restart: offset %d, err %v; want offset 2 (no duplicate)", next.Offset, err)
	}
}
