package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/bootstrap/envconfig"
	"github.com/sink-io/sink/domain"
)

func TestDeadLetterCommandErrors(t *testing.T) {
	cfg, err := envconfig.Load(map[string]string{"SINK_KAFKA_BROKERS": "127.0.0.1:1", "SINK_KAFKA_TOPIC": "muts"})
	if err != nil {
		t.Fatal(err)
	}
	var ue badUsage
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"list", "extra"},
		{"list", "--nope"},
		{"replay"},
		{"replay", "--all", "--id", "x"},
	} {
		var out bytes.Buffer
		if err := DeadLetter(context.Background(), cfg, args, &out); !errors.As(err, &ue) {
			t.Errorf("%q: got %v, want a usage error", args, err)
		}
	}
	noKafka, _ := envconfig.Load(map[string]string{})
	if err := DeadLetter(context.Background(), noKafka, []string{"list"}, io.Discard); err == nil || !strings.Contains(err.Error(), "SINK_KAFKA_BROKERS") {
		t.Errorf("without Kafka: %v", err)
	}
}

func letter(p int32, off int64, id string, decodable bool) kafka.DeadLetter {
	d := kafka.DeadLetter{Partition: p, Offset: off, MutationID: id}
	if decodable {
		d.Mutation = &domain.Mutation{ID: id, Kind: domain.MutationDelete}
	} else {
		d.DecodeError = "bad"
	}
	return d
}

func TestSelectDeadLetters(t *testing.T) {
	letters := []kafka.DeadLetter{
		letter(0, 0, "a", true),
		letter(0, 1, "", false),
		letter(0, 2, "b", true),
		letter(1, 0, "c", true),
		letter(1, 2, "a", true), // a dead-lettered again after a replay
	}
	pos := func(ds []kafka.DeadLetter) string {
		var s []string
		for _, d := range ds {
			s = append(s, d.MutationID+"@"+string(rune('0'+d.Partition))+"/"+string(rune('0'+d.Offset)))
		}
		return strings.Join(s, " ")
	}
	got, err := selectDeadLetters(letters, true, "", "", io.Discard)
	if err != nil || pos(got) != "b@0/2 c@1/0 a@1/2" {
		t.Errorf("--all: %s, %v", pos(got), err)
	}
	got, err = selectDeadLetters(letters, false, "", "a,c", io.Discard)
	if err != nil || pos(got) != "c@1/0 a@1/2" {
		t.Errorf("--id a,c: %s, %v", pos(got), err)
	}
	if _, err := selectDeadLetters(letters, false, "1:2,2", "", io.Discard); err == nil || !strings.Contains(err.Error(), "2 partitions") {
		t.Errorf("--offset 2 (in partitions 0 and 1): %v, want an ambiguity error", err)
	}
	got, err = selectDeadLetters(letters, false, "1:2,0:2", "", io.Discard)
	if err != nil || pos(got) != "b@0/2 a@1/2" {
		t.Errorf("--offset 1:2,0:2: %s, %v", pos(got), err)
	}
	if _, err := selectDeadLetters(letters, false, "0:1", "", io.Discard); err == nil || !strings.Contains(err.Error(), "undecodable") {
		t.Errorf("--offset of an undecodable record: %v", err)
	}
	if _, err := selectDeadLetters(letters, false, "7", "", io.Discard); err == nil {
		t.Error("--offset 7 found something")
	}
	if _, err := selectDeadLetters(letters, false, "", "zzz", io.Discard); err == nil {
		t.Error("--id zzz found something")
	}
}
