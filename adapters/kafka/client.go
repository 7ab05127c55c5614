package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ClientConfig configures the franz-go client of a Sink process. One client
// serves producing (the queue, dead letters) and, when GroupID is set,
// consuming.
type ClientConfig struct {
	// Brokers are the seed brokers.
	Brokers []string
	// ClientID names the client in broker logs (default DefaultClientID).
	ClientID string
	// PublishTimeout bounds how long a record may wait for its
	// acknowledgement (kgo.RecordDeliveryTimeout) and how long a broker may
	// take to answer a produce request (kgo.ProduceRequestTimeout). Default
	// DefaultPublishTimeout.
	PublishTimeout time.Duration
	// MaxRecordBytes is the largest record value the client produces
	// (kgo.ProducerBatchMaxBytes is set above it). Default
	// DefaultMaxRecordBytes (1 MiB). The topics' max.message.bytes must
	// allow it too.
	MaxRecordBytes int
	// Linger is how long the producer waits to fill batches (default 0:
	// batches form while earlier requests are in flight).
	Linger time.Duration

	// GroupID, when set, makes the client a member of this consumer group
	// consuming Topic with auto-commit disabled, starting from the earliest
	// offset when the group has no committed offset.
	GroupID string
	// Topic is the consumed topic (with GroupID).
	Topic string
	// SessionTimeout of the group member (default DefaultSessionTimeout;
	// Kafka brokers accept 6 s to 5 min by default).
	SessionTimeout time.Duration
	// RebalanceTimeout is how long the group waits, in a rebalance, for
	// the member to finish its poll and rejoin before expelling it
	// (default DefaultRebalanceTimeout). The worker's time budget of one
	// batch (WorkerConfig.BatchTimeout) must stay well below it.
	RebalanceTimeout time.Duration
	// InstanceID, when set (with GroupID), makes the member static
	// (kgo.InstanceID, Kafka's group.instance.id): restarted within its
	// session timeout, it gets its partitions back without a rebalance;
	// closed, it does not leave the group (its partitions wait for it until
	// the session timeout ends).
	InstanceID string

	// Logger receives the client's warnings and errors (nil: discarded).
	Logger *slog.Logger
	// Security is TLS and SASL towards the brokers (SecurityConfig.Opts).
	Security SecurityConfig
	// ExtraOpts are appended to the client options.
	ExtraOpts []kgo.Opt
}

// NewClient returns a franz-go client for cfg: idempotent producer with
// acks from all in-sync replicas, auto topic creation allowed, and with
// GroupID a consumer group member that never commits by itself and blocks
// rebalances while a polled batch is being processed (the Consumer allows
// them after committing).
func NewClient(cfg ClientConfig) (*kgo.Client, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("cannot create the Kafka client: no brokers")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cannot create the Kafka client: %w", err)
	}
	batchMax := int32(1 << 30)
	if cfg.MaxRecordBytes < 1<<30-1<<20 {
		batchMax = int32(cfg.MaxRecordBytes + 1<<20)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(cfg.PublishTimeout),
		kgo.ProduceRequestTimeout(cfg.PublishTimeout),
		kgo.ProducerLinger(cfg.Linger),
		kgo.ProducerBatchMaxBytes(batchMax),
		kgo.AllowAutoTopicCreation(),
	}
	if cfg.Logger != nil {
		opts = append(opts, kgo.WithLogger(slogLogger{cfg.Logger.With("component", "kafka-client")}))
	}
	if cfg.GroupID != "" {
		if cfg.Topic == "" {
			return nil, errors.New("cannot create the Kafka client: a consumer group needs a topic")
		}
		heartbeat := 3 * time.Second
		if h := cfg.SessionTimeout / 3; h < heartbeat {
			heartbeat = h
		}
		opts = append(opts,
			kgo.ConsumerGroup(cfg.GroupID),
			kgo.ConsumeTopics(cfg.Topic),
			kgo.DisableAutoCommit(),
			kgo.BlockRebalanceOnPoll(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.SessionTimeout(cfg.SessionTimeout),
			kgo.RebalanceTimeout(cfg.RebalanceTimeout),
			kgo.HeartbeatInterval(heartbeat),
			kgo.FetchMaxPartitionBytes(batchMax),
		)
		if cfg.InstanceID != "" {
			opts = append(opts, kgo.InstanceID(cfg.InstanceID))
		}
	}
	sec, err := cfg.Security.Opts()
	if err != nil {
		return nil, fmt.Errorf("cannot create the Kafka client: %w", err)
	}
	opts = append(opts, sec...)
	opts = append(opts, cfg.ExtraOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("cannot create the Kafka client: %w", err)
	}
	return cl, nil
}

// slogLogger adapts slog to kgo.Logger: warnings and errors, and the
// client's (chatty) info logs only when the logger is at debug level.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Level() kgo.LogLevel {
	if s.l.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelInfo
	}
	return kgo.LogLevelWarn
}

func (s slogLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	var l slog.Level
	switch level {
	case kgo.LogLevelError:
		l = slog.LevelError
	case kgo.LogLevelWarn:
		l = slog.LevelWarn
	case kgo.LogLevelInfo:
		l = slog.LevelInfo
	default:
		l = slog.LevelDebug
	}
	s.l.Log(context.Background(), l, msg, keyvals...)
}
