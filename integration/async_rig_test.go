package integration_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/countprofile"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// counterRig is the set-up of the trials with real worker processes: a
// MongoDB-wire server and a standalone broker (4 partitions) that outlive
// every worker, a server in the test process that queues merges of the
// non-idempotent "count" profile (each adds 1 and its tag) over records
// counter records, and the sinkcount binary the workers run.
type counterRig struct {
	t       *testing.T
	records int
	queued  int
	mongo   *mongotest.Server
	broker  *kafkatest.Broker
	bin     string
	ns      string
	c       sinkv1.SinkClient
	adm     *kadm.Client
}

func newCounterRig(t *testing.T, records int) *counterRig {
	t.Helper()
	r := &counterRig{t: t, records: records}
	r.mongo = mongotest.Private(t)
	// The broker lets a member's session be short, so that the partitions
	// of a killed or frozen worker pass to the next one within seconds.
	r.broker = kafkatest.StartBroker(t, kafkatest.Topics(asyncTopic, asyncDLT), kafkatest.Partitions(4),
		kafkatest.BrokerArgs("-min-session-timeout", "1s"))
	r.bin = asyncBuildSinkCount(t)
	r.ns = mongotest.DatabaseName(t)
	server := sinktest.Start(t, asyncEnv([]string{r.broker.Addr()}, bootstrap.ModeServer, r.mongo.SinkEnv()), bootstrap.MergeProfile(countprofile.New))
	r.c = server.Client
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.broker.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r.adm = kadm.NewClient(cl)
	return r
}

func (r *counterRig) addr(i int) *sinkv1.RecordAddress {
	return addr(r.ns, "counters", fmt.Sprintf("c%02d", i))
}

// tag is the tag of the i-th queued merge.
func tag(i int) string { return fmt.Sprintf("m%05d", i) }

// queue queues n more merges, round robin over the records.
func (r *counterRig) queue(n int) {
	r.t.Helper()
	ops := make([]*sinkv1.WriteOperation, 0, n)
	for i := r.queued; i < r.queued+n; i++ {
		intent, err := countprofile.Encode(domain.ContentTypeBSON, countprofile.Intent{Add: 1, ID: tag(i)})
		if err != nil {
			r.t.Fatal(err)
		}
		ops = append(ops, &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{
			Address: r.addr(i % r.records), Profile: countprofile.Name,
			Intent: &sinkv1.Document{ContentType: intent.ContentType, Data: intent.Data}}}})
	}
	for start := 0; start < len(ops); start += 500 {
		asyncMustAccept(r.t, r.c, ops[start:min(start+500, len(ops))]...)
	}
	r.queued += n
}

// applied reads every counter: the applications in total and per tag.
func (r *counterRig) applied() (total int, ids map[string]int, state string) {
	ids = map[string]int{}
	ops := make([]*sinkv1.ReadOperation, r.records)
	for i := range ops {
		ops[i] = &sinkv1.ReadOperation{Address: r.addr(i)}
	}
	resp, err := r.c.Read(context.Background(), &sinkv1.ReadRequest{Operations: ops})
	if err != nil {
		return -1, nil, err.Error()
	}
	for i, res := range resp.GetResults() {
		if res.GetStatus() == notFound {
			continue
		}
		if res.GetStatus() != found {
			return -1, nil, fmt.Sprintf("record %d: %v %v", i, res.GetStatus(), res.GetError())
		}
		var doc countprofile.Counter
		d := domain.Document{ContentType: res.GetDocument().GetContentType(), Data: res.GetDocument().GetData()}
		if err := countprofile.Decode(d, &doc); err != nil {
			return -1, nil, err.Error()
		}
		if doc.N != len(doc.IDs) {
			return -1, nil, fmt.Sprintf("record %d: n=%d but %d ids", i, doc.N, len(doc.IDs))
		}
		total += doc.N
		for _, id := range doc.IDs {
			ids[id]++
		}
	}
	return total, ids, fmt.Sprintf("%d applied, %d distinct of %d queued", total, len(ids), r.queued)
}

// workerEnv is the environment of a worker process of group sink-workers
// (extra entries, KEY=VALUE, override the defaults) and the base URL of its
// HTTP endpoint.
func (r *counterRig) workerEnv(logLevel string, extra ...string) ([]string, string) {
	port := kafkatest.FreePort(r.t)
	env := []string{
		"SINK_MODE=worker",
		"SINK_KAFKA_BROKERS=" + r.broker.Addr(),
		"SINK_KAFKA_TOPIC=" + asyncTopic,
		"SINK_KAFKA_GROUP_ID=sink-workers",
		"SINK_APPLY_MAX_BACKOFF=500ms",
		"SINK_HTTP_ADDRESS=127.0.0.1:" + strconv.Itoa(port),
		"SINK_LOG_FORMAT=text",
		"SINK_LOG_LEVEL=" + logLevel,
	}
	for k, v := range r.mongo.SinkEnv() {
		env = append(env, k+"="+v)
	}
	return append(env, extra...), fmt.Sprintf("http://127.0.0.1:%d", port)
}

// drainAndCount waits (up to timeout) until every queued merge was applied
// and the group committed the whole log, then counts: merges lost (never
// applied) and applications beyond the first of a merge. It reports both
// as test errors and returns them with the total of applications.
func (r *counterRig) drainAndCount(timeout time.Duration) (lost, twice, total int) {
	t := r.t
	var ids map[string]int
	deadline := time.Now().Add(timeout)
	for {
		total, ids, _ = r.applied()
		if total < 0 {
			t.Fatal("cannot read the counters")
		}
		if len(ids) == r.queued || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(ids) == r.queued {
		// Then the whole log is committed: nothing more can apply.
		eventually(t, 30*time.Second, "the workers to commit the whole log", func() (bool, string) {
			return groupCaughtUp(r.adm, "sink-workers", asyncTopic)
		})
		total, ids, _ = r.applied()
	}
	for i := range r.queued {
		switch n := ids[tag(i)]; {
		case n == 0:
			lost++
		case n > 1:
			twice += n - 1
		}
	}
	if len(ids) > r.queued {
		t.Errorf("%d distinct tags applied, only %d queued", len(ids), r.queued)
	}
	if lost > 0 {
		var missing []string
		for i := 0; i < r.queued && len(missing) < 10; i++ {
			if ids[tag(i)] == 0 {
				missing = append(missing, fmt.Sprintf("%s (record c%02d)", tag(i), i%r.records))
			}
		}
		_, lag := groupCaughtUp(r.adm, "sink-workers", asyncTopic)
		_, members := groupMembers(r.adm, "sink-workers", "Stable", 1)
		t.Logf("the group: %s; %s", members, lag)
		t.Errorf("%d accepted mutations were lost (or not applied within %v), for example %s", lost, timeout, strings.Join(missing, ", "))
	}
	if twice > 0 {
		t.Errorf("%d applications were duplicates: a mutation was applied twice", twice)
	}
	return lost, twice, total
}

// deadLetters reads the dead-letter topic.
func (r *counterRig) deadLetters() []kafka.DeadLetter {
	r.t.Helper()
	letters, err := kafka.ReadDeadLetters(context.Background(), []string{r.broker.Addr()}, asyncDLT)
	if err != nil {
		r.t.Fatalf("reading the dead letters: %v", err)
	}
	return letters
}
