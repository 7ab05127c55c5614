package kafka

import (
	"strings"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	if c := DefaultClientConfig(); c.PublishTimeout != 5*time.Second || c.SessionTimeout != DefaultSessionTimeout ||
		c.RebalanceTimeout != DefaultRebalanceTimeout || c.ClientID != DefaultClientID || c.MaxRecordBytes != DefaultMaxRecordBytes {
		t.Errorf("client defaults %+v", c)
	}
	if c := DefaultQueueConfig(); c.PublishTimeout != DefaultClientConfig().PublishTimeout {
		t.Errorf("queue publish timeout %s, client's %s", c.PublishTimeout, DefaultClientConfig().PublishTimeout)
	}
	if c := DefaultSubscriberConfig(); c.MaxPollRecords != 500 || c.CommitTimeout != 10*time.Second || c.MaxParked != 0 {
		t.Errorf("subscriber defaults %+v", c)
	}
	if c := DefaultWorkerConfig(); c.BatchTimeout != DefaultRebalanceTimeout/3 || c.DeadLetterTimeout != c.BatchTimeout/2 || c.MaxAttempts != 10 {
		t.Errorf("worker defaults %+v", c)
	}
	for name, err := range map[string]error{"client": DefaultClientConfig().Validate(), "queue": DefaultQueueConfig().Validate(),
		"subscriber": DefaultSubscriberConfig().Validate(), "worker": DefaultWorkerConfig().Validate()} {
		if err != nil {
			t.Errorf("default %s config invalid: %v", name, err)
		}
	}
	// Set fields are kept; MaxParked follows MaxPollRecords.
	s := SubscriberConfig{MaxPollRecords: 7, CommitTimeout: time.Second}
	s.setDefaults()
	if s.MaxPollRecords != 7 || s.CommitTimeout != time.Second || s.MaxParked != 70 || s.CloseTimeout != DefaultCloseTimeout {
		t.Errorf("defaulted subscriber config %+v", s)
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"client", ClientConfig{PublishTimeout: -time.Second, MaxRecordBytes: 1, SessionTimeout: 10 * time.Second, RebalanceTimeout: 2 * time.Second}.Validate(),
			[]string{"PublishTimeout must be positive, got -1s", "RebalanceTimeout must be at least 3s, got 2s", "RebalanceTimeout (2s) must not be below SessionTimeout (10s)"}},
		{"subscriber", SubscriberConfig{MaxPollRecords: 0, CommitTimeout: time.Second, RedeliveryDelay: time.Second, CloseTimeout: time.Second, MaxParked: -1, LogEpoch: "\xff"}.Validate(),
			[]string{"MaxPollRecords must be positive, got 0", "MaxParked must not be negative, got -1", "LogEpoch must be valid UTF-8 of at most 256 bytes"}},
		{"worker", WorkerConfig{MaxBatch: 1, BatchTimeout: 0, DeadLetterTimeout: time.Second, MaxAttempts: -2}.Validate(),
			[]string{"BatchTimeout must be positive, got 0s", "MaxAttempts must be positive, got -2"}},
		{"queue", QueueConfig{}.Validate(), []string{"PublishTimeout must be positive, got 0s"}},
	} {
		if tc.err == nil {
			t.Errorf("%s: invalid config accepted", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(tc.err.Error(), w) {
				t.Errorf("%s: missing %q in:\n%v", tc.name, w, tc.err)
			}
		}
	}
}

// The constructors default zero fields and reject invalid ones.
func TestConstructorsValidate(t *testing.T) {
	if _, err := NewClient(ClientConfig{Brokers: []string{"127.0.0.1:1"}, RebalanceTimeout: time.Second}); err == nil ||
		!strings.Contains(err.Error(), "RebalanceTimeout must be at least 3s") {
		t.Errorf("NewClient with a 1s rebalance timeout: %v", err)
	}
	cl, err := NewClient(ClientConfig{Brokers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatalf("NewClient with defaults: %v", err)
	}
	defer cl.Close()
	if _, err := NewSubscriber(cl, SubscriberConfig{Topic: "t", MaxParked: -1}); err == nil || !strings.Contains(err.Error(), "MaxParked") {
		t.Errorf("NewSubscriber with a negative MaxParked: %v", err)
	}
	q, err := NewQueue(NewPublisher(cl), QueueConfig{Topic: "t"})
	if err != nil {
		t.Fatalf("NewQueue with defaults: %v", err)
	}
	if q.timeout != DefaultPublishTimeout {
		t.Errorf("queue timeout %s, want %s", q.timeout, DefaultPublishTimeout)
	}
	if _, err := NewQueue(NewPublisher(cl), QueueConfig{Topic: "t", PublishTimeout: -time.Second}); err == nil {
		t.Error("NewQueue with a negative publish timeout accepted")
	}
}
