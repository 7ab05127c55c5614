// Package kafkatest provides Kafka brokers for tests, backed by franz-go's
// fake cluster (kfake):
//
//   - InProcess starts a cluster inside the test process; it is the fastest
//     option and is closed when the test ends.
//   - StartBroker runs the standalone kfakebroker command
//     (internal/testkit/cmd/kfakebroker) as a child process on a fixed loopback
//     port with a persistent data dir, so a test can stop, kill and restart
//     the broker on the same address and observe what survives.
//
// Facts about kfake that tests built on this package rely on:
//
//   - The minimum group session timeout is 6 s (kgo's default of 45 s is
//     accepted too); use kgo.SessionTimeout(6*time.Second) so that a member
//     that vanishes without leaving is expired quickly. Joining an empty
//     group has no initial rebalance delay.
//   - With a data dir, produced batches and offset commits are written to
//     disk (without fsync) before the broker answers, so both survive a clean
//     Stop and also a Kill (SIGKILL): the page cache keeps them. Only an OS
//     crash could lose them. Topics made by CreateTopics or Topics(...)
//     persist at once; auto-created topics would persist only on a clean
//     close, so kfakebroker creates them through the persisting path first.
//   - A kgo producer (idempotent by default) whose broker goes away writes
//     its next produce request to the dead connection; from then on it
//     cannot fail those records and ProduceSync ignores its context until
//     the broker is back (then the records are delivered once). To get an
//     error while the broker is down and recover with the same client, use
//     kgo.AllowIdempotentProduceCancellation() with
//     kgo.RecordDeliveryTimeout, and for a fast recovery a short
//     kgo.RetryBackoffFn and kgo.MetadataMinAge (default 5 s).
package kafkatest

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Option configures InProcess and StartBroker.
type Option func(*config)

type config struct {
	topics     []string
	partitions int
	brokers    int
	kfakeOpts  []kfake.Opt
	extraArgs  []string
}

func newConfig(opts []Option) config {
	c := config{partitions: 1, brokers: 1}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// Topics pre-creates the named topics, each with the Partitions count.
func Topics(names ...string) Option {
	return func(c *config) { c.topics = append(c.topics, names...) }
}

// Partitions sets the partition count of the pre-created topics and of
// topics that clients auto-create (kgo.AllowAutoTopicCreation). Default 1.
func Partitions(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.partitions = n
		}
	}
}

// Brokers sets the number of brokers in the cluster. Default 1. A
// StartBroker cluster of n brokers listens on n consecutive ports.
func Brokers(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.brokers = n
		}
	}
}

// ClusterOpts passes extra kfake options to an InProcess cluster (for
// example kfake.GroupMinSessionTimeout or kfake.SeedTopics). StartBroker
// ignores them: use BrokerArgs there.
func ClusterOpts(opts ...kfake.Opt) Option {
	return func(c *config) { c.kfakeOpts = append(c.kfakeOpts, opts...) }
}

// BrokerArgs passes extra command line flags to the kfakebroker process
// started by StartBroker (for example "-log-level", "debug" or "-sync").
// InProcess ignores them.
func BrokerArgs(args ...string) Option {
	return func(c *config) { c.extraArgs = append(c.extraArgs, args...) }
}

// InProcess starts an in-process kfake cluster for one test (closed in
// t.Cleanup) with the given topics pre-created, and returns the seed broker
// addresses. Topics that clients auto-create get the Partitions count too.
func InProcess(t testing.TB, opts ...Option) []string {
	t.Helper()
	return InProcessCluster(t, opts...).ListenAddrs()
}

// InProcessCluster is InProcess returning the cluster itself, for tests that
// use kfake's control functions (fault injection, moving leaders, ...).
func InProcessCluster(t testing.TB, opts ...Option) *kfake.Cluster {
	t.Helper()
	cfg := newConfig(opts)
	kopts := []kfake.Opt{
		kfake.NumBrokers(cfg.brokers),
		kfake.DefaultNumPartitions(cfg.partitions),
		kfake.AllowAutoTopicCreation(),
	}
	if len(cfg.topics) > 0 {
		kopts = append(kopts, kfake.SeedTopics(int32(cfg.partitions), cfg.topics...))
	}
	kopts = append(kopts, cfg.kfakeOpts...)
	c, err := kfake.NewCluster(kopts...)
	if err != nil {
		t.Fatalf("kafkatest: starting in-process kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}
