package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/bootstrap/cli"
	"github.com/sink-io/sink/domain"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// An undecodable record, a merge with an unknown profile and a REPLACE of a
// missing record all end in the dead-letter topic with metadata; the
// partition keeps flowing; `sink dead-letter list` shows them and
// `sink dead-letter replay` re-applies the REPLACE once the record exists.
func TestAsyncPoisonMessagesAreDeadLetteredAndReplayed(t *testing.T) {
	asyncSkipShort(t)
	// One partition: the poison records sit in front of the good ones.
	forEachTransport(t, 1, testAsyncPoison)
}

func testAsyncPoison(t *testing.T, tr *asyncTransport) {
	s := tr.startAll(t, map[string]string{"SINK_APPLY_MAX_ATTEMPTS": "3"})
	c := s.Client

	// 1. An undecodable record, produced by someone else.
	garbage := message.NewMessage("", []byte("\x07not a mutation"))
	garbage.Metadata.Set(kafka.KeyMetadata, "not-an-address")
	tr.publish(t, garbage)
	// 2. A merge through a profile this Sink does not have (the server
	// would refuse it, so it is queued directly).
	unknown := domain.Mutation{ID: "unknown-profile-1", Kind: domain.MutationMerge,
		Address: domain.Address{Store: "primary", Namespace: "poison", Dataset: "docs", Key: domain.StringKey("u")},
		Merge:   domain.MergeIntent{Profile: "no-such-profile", Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{}`)}}}
	um, err := kafka.NewMutationMessage(unknown)
	if err != nil {
		t.Fatal(err)
	}
	tr.publish(t, um)
	// 3. A REPLACE of a record that does not exist, through the API.
	p := addr("poison", "docs", "p")
	replaceID := asyncMustAccept(t, c, putOp(p, `{"replaced":true}`, sinkv1.PutMode_PUT_MODE_REPLACE, nil))[0]
	// 4. Good mutations behind them in the same partition.
	good := addr("poison", "docs", "good")
	asyncMustAccept(t, c, putOp(good, `{"n":1}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil), mergeOp(good, "merge-patch", `{"m":2}`))
	eventuallyState(t, c, good, `{"n":1,"m":2}`, 30*time.Second)
	eventuallyState(t, c, p, "absent", time.Second)

	letters := tr.deadLetters(t, 3)
	if len(letters) != 3 {
		t.Fatalf("%d dead letters, want 3", len(letters))
	}
	byID := map[string]kafka.DeadLetter{}
	var undecodable *kafka.DeadLetter
	for i, d := range letters {
		if d.Reason == kafka.ReasonUndecodable {
			undecodable = &letters[i]
			continue
		}
		byID[d.MutationID] = d
	}
	offset := func(d kafka.DeadLetter, want int64) bool { return !tr.offsets || d.SourceOffset == want }
	if u := undecodable; u == nil || u.DecodeError == "" || u.ErrorCode != "INVALID_ARGUMENT" || u.SourceTopic != asyncTopic ||
		!offset(*u, 0) || u.DeadLetteredAt.IsZero() || u.Attempts != 0 || string(u.Value) != "\x07not a mutation" {
		t.Errorf("undecodable dead letter: %+v", undecodable)
	}
	if d := byID[unknown.ID]; d.Reason != kafka.ReasonApplyFailed || d.ErrorCode != "INVALID_ARGUMENT" || d.Mutation == nil ||
		d.Mutation.Merge.Profile != "no-such-profile" || !strings.Contains(d.ErrorMessage, "no-such-profile") || !offset(d, 1) || d.Attempts != 1 {
		t.Errorf("unknown-profile dead letter: %+v", d)
	}
	if d := byID[replaceID]; d.ErrorCode != "NOT_FOUND" || d.Mutation == nil || d.Mutation.Kind != domain.MutationPut ||
		d.Mutation.Address.Namespace != "poison" || !offset(d, 2) || d.Attempts < 1 || d.Mutation.SubmittedAt.IsZero() {
		t.Errorf("REPLACE dead letter: %+v", d)
	}
	for _, d := range letters {
		for _, h := range d.Headers {
			if strings.HasPrefix(h.Key, "_sink_kafka_batch") || h.Key == kafka.MetadataPartition || h.Key == kafka.MetadataOffset {
				t.Errorf("dead letter %s carries the subscriber's metadata %s", d.MutationID, h.Key)
			}
		}
	}
	if !tr.offsets {
		// Fix the cause (create the record), then replay the REPLACE.
		write(t, c, putOp(p, `{"created":true}`, sinkv1.PutMode_PUT_MODE_CREATE, nil))
		if err := kafka.Replay(ctx(t), tr.pub(t), asyncDLT, asyncTopic, []kafka.DeadLetter{byID[replaceID]}); err != nil {
			t.Fatal(err)
		}
		eventuallyState(t, c, p, `{"replaced":true}`, 30*time.Second)
		return
	}
	testAsyncPoisonCLI(t, tr, c, p, unknown.ID, replaceID)
}

// testAsyncPoisonCLI checks `sink dead-letter list` and `replay` (Kafka).
func testAsyncPoisonCLI(t *testing.T, tr *asyncTransport, c sinkv1.SinkClient, p *sinkv1.RecordAddress, unknownID, replaceID string) {
	cfg, err := bootstrap.LoadConfig(asyncEnv(tr.brokers, bootstrap.ModeServer, nil))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := cli.DeadLetter(context.Background(), cfg, []string{"list", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var views []cli.DeadLetterView
	if err := json.Unmarshal(out.Bytes(), &views); err != nil {
		t.Fatal(err)
	}
	byID := map[string]cli.DeadLetterView{}
	for _, v := range views {
		byID[v.MutationID] = v
	}
	if v := byID[unknownID]; v.Kind != "merge" || v.Profile != "no-such-profile" || v.SourceOffset != 1 {
		t.Errorf("unknown-profile dead letter view: %+v", v)
	}
	if v := byID[replaceID]; v.Kind != "put" || !strings.Contains(v.Address, "poison/docs") || v.SubmittedAt == "" {
		t.Errorf("REPLACE dead letter view: %+v", v)
	}

	// The text listing names every dead letter.
	var text bytes.Buffer
	if err := cli.DeadLetter(ctx(t), cfg, []string{"list"}, &text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{replaceID, unknownID, "NOT_FOUND", "(undecodable)", "3 dead letter(s)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("list output does not mention %q:\n%s", want, text.String())
		}
	}
	t.Logf("sink dead-letter list:\n%s", text.String())

	// An undecodable record cannot be replayed; an unknown selection fails.
	var sink bytes.Buffer
	if err := cli.DeadLetter(ctx(t), cfg, []string{"replay", "--offset", "0:0"}, &sink); err == nil || !strings.Contains(err.Error(), "undecodable") {
		t.Errorf("replaying the undecodable record: %v", err)
	}
	if err := cli.DeadLetter(ctx(t), cfg, []string{"replay", "--id", "nope"}, &sink); err == nil {
		t.Error("replaying an unknown mutation id succeeded")
	}

	// Fix the cause (create the record), then replay the REPLACE by id.
	write(t, c, putOp(p, `{"created":true}`, sinkv1.PutMode_PUT_MODE_CREATE, nil))
	var replay bytes.Buffer
	if err := cli.DeadLetter(ctx(t), cfg, []string{"replay", "--id", replaceID}, &replay); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(replay.String(), "replayed 1 mutation(s)") {
		t.Fatalf("replay output:\n%s", replay.String())
	}
	eventuallyState(t, c, p, `{"replaced":true}`, 30*time.Second)
	t.Logf("sink dead-letter replay --id %s:\n%s", replaceID, replay.String())
}
