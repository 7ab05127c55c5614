package kafka

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kadm"
)

// The subscriber keeps a whole poll in flight, accepts acks in any order,
// commits only the prefix of acked offsets and emits a nacked message and
// everything after it again, in offset order.
func TestSubscriberCommitsAckedPrefixAndRedeliversInOrder(t *testing.T) {
	env := newConsumerEnv(t, 1)
	for i := range 10 {
		env.submit(t, testMutation(fmt.Sprintf("m%d", i), "k"))
	}
	cl, err := NewClient(ClientConfig{Brokers: env.brokers, GroupID: "g", Topic: "muts", SessionTimeout: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sub, err := NewSubscriber(cl, SubscriberConfig{Topic: "muts", MaxPollRecords: 100, RedeliveryDelay: 10 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Subscribe(context.Background(), "other"); err == nil {
		t.Fatal("subscribed to a topic the client does not consume")
	}
	ch, err := sub.Subscribe(context.Background(), "muts")
	if err != nil {
		t.Fatal(err)
	}
	next := func() *message.Message {
		t.Helper()
		select {
		case m := <-ch:
			return m
		case <-time.After(20 * time.Second):
			t.Fatal("no message")
			return nil
		}
	}
	// The first poll: all ten messages arrive before any is acked.
	var first []*message.Message
	for len(first) < 10 {
		m := next()
		first = append(first, m)
		if got := m.Metadata.Get(MetadataOffset); got != strconv.Itoa(len(first)-1) {
			t.Fatalf("message %d has offset %s", len(first)-1, got)
		}
	}
	if size := first[0].Metadata.Get(MetadataBatchSize); size != "10" {
		t.Fatalf("batch size %q, want 10 (one poll)", size)
	}
	// Ack in reverse order, except offset 6, which is nacked.
	for i := 9; i >= 0; i-- {
		if i == 6 {
			first[i].Nack()
		} else {
			first[i].Ack()
		}
	}
	// Redelivery starts at offset 6, in order.
	for want := 6; want < 10; want++ {
		m := next()
		if got := m.Metadata.Get(MetadataOffset); got != strconv.Itoa(want) {
			t.Fatalf("redelivered offset %s, want %d", got, want)
		}
		m.Ack()
	}
	adm := kadm.NewClient(cl)
	waitFor(t, 20*time.Second, "the commit of offset 10", func() bool {
		offs, err := adm.FetchOffsets(context.Background(), "g")
		if err != nil {
			return false
		}
		o, ok := offs.Lookup("muts", 0)
		return ok && o.At == 10
	})
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if st := sub.Stats(); st.Records != 14 || st.Commits < 2 {
		t.Fatalf("stats %+v, want 14 records emitted and two commits", st)
	}
	if _, ok := <-ch; ok {
		t.Fatal("the output channel is open after Close")
	}
}
