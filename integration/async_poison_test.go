package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/integration/kafkatest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// An undecodable record, a merge with an unknown profile and a REPLACE of a
// missing record all end in the dead-letter topic with metadata; the
// partition keeps flowing; `sink dead-letter list` shows them and
// `sink dead-letter replay` re-applies the REPLACE once the record exists.
func TestAsyncPoisonMessagesAreDeadLetteredAndReplayed(t *testing.T) {
	asyncSkipShort(t)
	// One partition: the poison records sit in front of the good ones.
	brokers := kafkatest.InProcess(t, kafkatest.Topics(asyncTopic, asyncDLT), kafkatest.Partitions(1))
	s := asyncStartAll(t, brokers, map[string]string{"SINK_APPLY_MAX_ATTEMPTS": "3"})
	c := s.Client

	// 1. An undecodable record, produced by someone else.
	raw, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	garbage := &kgo.Record{Topic: asyncTopic, Key: []byte("not-an-address"), Value: []byte("\x07not a mutation")}
	if err := raw.ProduceSync(ctx(t), garbage).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// 2. A merge through a profile this Sink does not have (the server
	// would refuse it, so it is queued directly).
	q, err := kafka.NewQueue(kafka.NewPublisher(raw), kafka.QueueConfig{Topic: asyncTopic})
	if err != nil {
		t.Fatal(err)
	}
	unknown := domain.Mutation{ID: "unknown-profile-1", Kind: domain.MutationMerge,
		Address: domain.Address{Store: "primary", Namespace: "poison", Dataset: "docs", Key: domain.StringKey("u")},
		Merge:   domain.MergeIntent{Profile: "no-such-profile", Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{}`)}}}
	if errs := q.Submit(ctx(t), []domain.Mutation{unknown}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// 3. A REPLACE of a record that does not exist, through the API.
	p := addr("poison", "docs", "p")
	replaceID := asyncMustAccept(t, c, putOp(p, `{"replaced":true}`, sinkv1.PutMode_PUT_MODE_REPLACE, nil))[0]
	// 4. Good mutations behind them in the same partition.
	good := addr("poison", "docs", "good")
	asyncMustAccept(t, c, putOp(good, `{"n":1}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil), mergeOp(good, "merge-patch", `{"m":2}`))
	eventuallyState(t, c, good, `{"n":1,"m":2}`, 30*time.Second)
	eventuallyState(t, c, p, "absent", time.Second)

	cfg, err := bootstrap.LoadConfig(asyncEnv(brokers, bootstrap.ModeServer, nil))
	if err != nil {
		t.Fatal(err)
	}
	var views []bootstrap.DeadLetterView
	eventually(t, 30*time.Second, "three dead letters", func() (bool, string) {
		var out bytes.Buffer
		if err := bootstrap.DeadLetter(context.Background(), cfg, []string{"list", "--json"}, &out); err != nil {
			return false, err.Error()
		}
		views = nil
		if err := json.Unmarshal(out.Bytes(), &views); err != nil {
			return false, err.Error()
		}
		return len(views) == 3, out.String()
	})
	byID := map[string]bootstrap.DeadLetterView{}
	var undecodable *bootstrap.DeadLetterView
	for i, v := range views {
		if v.Reason == kafka.ReasonUndecodable {
			undecodable = &views[i]
			continue
		}
		byID[v.MutationID] = v
	}
	if u := undecodable; u == nil || u.DecodeError == "" || u.ErrorCode != "INVALID_ARGUMENT" || u.SourceTopic != asyncTopic ||
		u.SourceOffset != 0 || u.DeadLetteredAt == "" || u.Attempts != 0 {
		t.Errorf("undecodable dead letter: %+v", undecodable)
	}
	if v := byID[unknown.ID]; v.Reason != kafka.ReasonApplyFailed || v.ErrorCode != "INVALID_ARGUMENT" || v.Kind != "merge" ||
		v.Profile != "no-such-profile" || !strings.Contains(v.ErrorMessage, "no-such-profile") || v.SourceOffset != 1 || v.Attempts != 1 {
		t.Errorf("unknown-profile dead letter: %+v", v)
	}
	if v := byID[replaceID]; v.ErrorCode != "NOT_FOUND" || v.Kind != "put" || !strings.Contains(v.Address, "poison/docs") ||
		v.SourceOffset != 2 || v.Attempts < 1 || v.SubmittedAt == "" {
		t.Errorf("REPLACE dead letter: %+v", v)
	}

	// The text listing names every dead letter.
	var text bytes.Buffer
	if err := bootstrap.DeadLetter(ctx(t), cfg, []string{"list"}, &text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{replaceID, unknown.ID, "NOT_FOUND", "(undecodable)", "3 dead letter(s)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("list output does not mention %q:\n%s", want, text.String())
		}
	}
	t.Logf("sink dead-letter list:\n%s", text.String())

	// An undecodable record cannot be replayed; an unknown selection fails.
	var sink bytes.Buffer
	if err := bootstrap.DeadLetter(ctx(t), cfg, []string{"replay", "--offset", "0:0"}, &sink); err == nil || !strings.Contains(err.Error(), "undecodable") {
		t.Errorf("replaying the undecodable record: %v", err)
	}
	if err := bootstrap.DeadLetter(ctx(t), cfg, []string{"replay", "--id", "nope"}, &sink); err == nil {
		t.Error("replaying an unknown mutation id succeeded")
	}

	// Fix the cause (create the record), then replay the REPLACE by id.
	write(t, c, putOp(p, `{"created":true}`, sinkv1.PutMode_PUT_MODE_CREATE, nil))
	var replay bytes.Buffer
	if err := bootstrap.DeadLetter(ctx(t), cfg, []string{"replay", "--id", replaceID}, &replay); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(replay.String(), "replayed 1 mutation(s)") {
		t.Fatalf("replay output:\n%s", replay.String())
	}
	eventuallyState(t, c, p, `{"replaced":true}`, 30*time.Second)
	t.Logf("sink dead-letter replay --id %s:\n%s", replaceID, replay.String())
}
