package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
)

func testMutation(id, key string) domain.Mutation {
	return domain.Mutation{
		ID: id, Kind: domain.MutationMerge,
		Address:     domain.Address{Store: "primary", Namespace: "ns", Dataset: "ds", Key: domain.StringKey(key)},
		Merge:       domain.MergeIntent{Profile: "merge-patch", Intent: domain.Document{ContentType: "application/json", Data: []byte(`{"id":"` + id + `"}`)}},
		SubmittedAt: testTime,
	}
}

func TestQueueSubmitWritesKeyedRecords(t *testing.T) {
	brokers := kafkatest.InProcess(t, kafkatest.Topics("muts"), kafkatest.Partitions(3))
	q, err := NewQueue(NewPublisher(newTestClient(t, brokers, ClientConfig{})), QueueConfig{Topic: "muts"})
	if err != nil {
		t.Fatal(err)
	}
	var muts []domain.Mutation
	for i := range 30 {
		muts = append(muts, testMutation(fmt.Sprintf("m%02d", i), fmt.Sprintf("k%d", i%4)))
	}
	for i, err := range q.Submit(context.Background(), muts) {
		if err != nil {
			t.Fatalf("mutation %d: %v", i, err)
		}
	}
	recs := readAll(t, brokers, "muts", len(muts))
	byID := map[string]domain.Mutation{}
	for _, m := range muts {
		byID[m.ID] = m
	}
	last := map[string]string{}
	for _, r := range recs {
		m, err := decodeRecord(r.Key, r.Value)
		if err != nil {
			t.Fatal(err)
		}
		want := byID[m.ID]
		if string(r.Key) != string(domain.EncodeAddress(want.Address)) {
			t.Fatalf("record key of %s is not the address encoding", m.ID)
		}
		if string(m.Merge.Intent.Data) != string(want.Merge.Intent.Data) {
			t.Fatalf("mutation %s: intent %s", m.ID, m.Merge.Intent.Data)
		}
		k := m.Address.Key.StringValue()
		if last[k] > m.ID {
			t.Fatalf("record %s: %s after %s", k, m.ID, last[k])
		}
		last[k] = m.ID
		if got := Unmarshal(r).UUID; got != m.ID {
			t.Fatalf("message UUID %q, want the mutation id %q", got, m.ID)
		}
	}
}

// stubPublisher returns a fixed error from Publish.
type stubPublisher struct {
	err  func(msgs []*message.Message) error
	msgs []*message.Message
}

func (s *stubPublisher) Publish(_ string, msgs ...*message.Message) error {
	s.msgs = msgs
	return s.err(msgs)
}
func (s *stubPublisher) Close() error { return nil }

func TestQueueMapsErrors(t *testing.T) {
	muts := []domain.Mutation{testMutation("a", "1"), testMutation("b", "2"), testMutation("c", "3")}
	bad := testMutation("bad", "4")
	bad.Kind = 99
	withBad := []domain.Mutation{muts[0], bad, muts[1], muts[2]}

	t.Run("per-message errors", func(t *testing.T) {
		pub := &stubPublisher{err: func(msgs []*message.Message) error {
			return &PublishError{Topic: "t", Total: len(msgs), Failed: []FailedMessage{{Index: 2, UUID: msgs[2].UUID, Err: fmt.Errorf("%w: boom", ErrOutcomeUnknown)}}}
		}}
		q, _ := NewQueue(pub, QueueConfig{Topic: "t"})
		errs := q.Submit(context.Background(), withBad)
		if len(pub.msgs) != 3 {
			t.Fatalf("published %d messages, want 3 (the unencodable one is skipped)", len(pub.msgs))
		}
		if errs[0] != nil || errs[2] != nil {
			t.Fatalf("errs = %v", errs)
		}
		if c := domain.CodeOf(errs[1]); c != domain.CodeInternal {
			t.Fatalf("unencodable: code %v", c)
		}
		e := domain.AsError(errs[3])
		if e == nil || e.Code != domain.CodeUnavailable || !e.Retryable || !strings.Contains(e.Message, "may still be queued") {
			t.Fatalf("failed publish: %#v", e)
		}
	})
	t.Run("whole-call error", func(t *testing.T) {
		q, _ := NewQueue(&stubPublisher{err: func([]*message.Message) error { return errors.New("down") }}, QueueConfig{Topic: "t"})
		for i, err := range q.Submit(context.Background(), muts) {
			if e := domain.AsError(err); e == nil || e.Code != domain.CodeUnavailable || !e.Retryable {
				t.Fatalf("mutation %d: %v", i, err)
			}
		}
	})
	t.Run("deadline", func(t *testing.T) {
		var deadline time.Time
		q, _ := NewQueue(&stubPublisher{err: func(msgs []*message.Message) error {
			deadline, _ = msgs[0].Context().Deadline()
			return nil
		}}, QueueConfig{Topic: "t", PublishTimeout: 2 * time.Second})
		q.Submit(context.Background(), muts)
		if d := time.Until(deadline); d <= 0 || d > 2*time.Second {
			t.Fatalf("publish deadline in %v, want within 2s", d)
		}
	})
}

func TestNewQueueValidates(t *testing.T) {
	if _, err := NewQueue(nil, QueueConfig{Topic: "t"}); err == nil {
		t.Error("nil publisher accepted")
	}
	if _, err := NewQueue(&stubPublisher{}, QueueConfig{}); err == nil {
		t.Error("empty topic accepted")
	}
}
