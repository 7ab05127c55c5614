package kafka

import (
	"time"
	"unicode/utf8"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/check"
)

// Defaults of the adapter's settings. The constructors fill the zero
// fields of their configs with them (setDefaults), and the environment
// layer's defaults are these values (DefaultClientConfig and the other
// Default…Config functions).
const (
	// DefaultClientID is ClientConfig.ClientID's default.
	DefaultClientID = "sink"
	// DefaultPublishTimeout is the default of ClientConfig.PublishTimeout
	// and QueueConfig.PublishTimeout.
	DefaultPublishTimeout = 5 * time.Second
	// DefaultMaxRecordBytes is ClientConfig.MaxRecordBytes's default.
	DefaultMaxRecordBytes = 1 << 20
	// DefaultSessionTimeout is ClientConfig.SessionTimeout's default.
	DefaultSessionTimeout = 10 * time.Second
	// DefaultRebalanceTimeout is ClientConfig.RebalanceTimeout's default
	// (also franz-go's and Kafka's).
	DefaultRebalanceTimeout = 60 * time.Second
	// MinRebalanceTimeout is the shortest ClientConfig.RebalanceTimeout:
	// a worker's batch gets a third of it, its dead letters and its offset
	// commit a sixth each.
	MinRebalanceTimeout = 3 * time.Second

	// DefaultMaxPollRecords is SubscriberConfig.MaxPollRecords's default.
	DefaultMaxPollRecords = 500
	// DefaultCommitTimeout is SubscriberConfig.CommitTimeout's default.
	DefaultCommitTimeout = 10 * time.Second
	// DefaultRedeliveryDelay is SubscriberConfig.RedeliveryDelay's default.
	DefaultRedeliveryDelay = time.Second
	// DefaultCloseTimeout is SubscriberConfig.CloseTimeout's default.
	DefaultCloseTimeout = 30 * time.Second
	// MaxLogEpochBytes is the longest SubscriberConfig.LogEpoch: the
	// longest log identity the records' applied marks hold.
	MaxLogEpochBytes = domain.MaxLogBytes

	// DefaultMaxBatch is WorkerConfig.MaxBatch's default.
	DefaultMaxBatch = 10000
	// DefaultBatchTimeout is WorkerConfig.BatchTimeout's default: a third
	// of DefaultRebalanceTimeout.
	DefaultBatchTimeout = DefaultRebalanceTimeout / 3
	// DefaultMaxAttempts is WorkerConfig.MaxAttempts's default.
	DefaultMaxAttempts = 10
)

// DefaultClientConfig returns a ClientConfig with every default filled in.
func DefaultClientConfig() ClientConfig {
	var c ClientConfig
	c.setDefaults()
	return c
}

// setDefaults fills the zero fields with the defaults.
func (c *ClientConfig) setDefaults() {
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = DefaultRebalanceTimeout
	}
}

// Validate reports every problem of the settings' values at once (NewClient
// also needs brokers, and a topic with GroupID). Call it on a defaulted
// config: zero values are problems here.
func (c ClientConfig) Validate() error {
	var p check.Problems
	p.PositiveDuration("PublishTimeout", c.PublishTimeout)
	p.Positive("MaxRecordBytes", c.MaxRecordBytes)
	p.NotNegative("Linger", c.Linger)
	p.PositiveDuration("SessionTimeout", c.SessionTimeout)
	if c.RebalanceTimeout < MinRebalanceTimeout {
		p.Add("RebalanceTimeout must be at least %s, got %s", MinRebalanceTimeout, c.RebalanceTimeout)
	}
	if n := len(c.InstanceID); n > 249 {
		p.Add("InstanceID is %d bytes; at most 249", n)
	}
	for _, r := range c.InstanceID {
		if r < 0x21 || r > 0x7e {
			p.Add("InstanceID must be printable ASCII without spaces, got %q", c.InstanceID)
			break
		}
	}
	if c.SessionTimeout > 0 && c.RebalanceTimeout < c.SessionTimeout {
		p.Add("RebalanceTimeout (%s) must not be below SessionTimeout (%s)", c.RebalanceTimeout, c.SessionTimeout)
	}
	return p.Err()
}

// DefaultPipelineWindow is the default SubscriberConfig.PipelineWindow.
const DefaultPipelineWindow = 500 * time.Millisecond

// DefaultSubscriberConfig returns a SubscriberConfig with every default
// filled in, except MaxParked, left 0 so that it follows MaxPollRecords
// (Logger, Observer and Fence are left nil too).
func DefaultSubscriberConfig() SubscriberConfig {
	var c SubscriberConfig
	c.setDefaults()
	c.MaxParked = 0
	return c
}

// setDefaults fills the zero fields with the defaults (values only; the
// constructor supplies the logger, observer and fence).
func (c *SubscriberConfig) setDefaults() {
	if c.MaxPollRecords == 0 {
		c.MaxPollRecords = DefaultMaxPollRecords
	}
	if c.CommitTimeout == 0 {
		c.CommitTimeout = DefaultCommitTimeout
	}
	if c.RedeliveryDelay == 0 {
		c.RedeliveryDelay = DefaultRedeliveryDelay
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.MaxParked == 0 {
		c.MaxParked = 10 * c.MaxPollRecords
	}
	if c.PipelineWindow == 0 {
		c.PipelineWindow = DefaultPipelineWindow
	}
}

// Validate reports every problem of the settings' values at once
// (NewSubscriber also needs the topic). Call it on a defaulted config.
func (c SubscriberConfig) Validate() error {
	var p check.Problems
	p.Positive("MaxPollRecords", c.MaxPollRecords)
	p.PositiveDuration("CommitTimeout", c.CommitTimeout)
	p.PositiveDuration("RedeliveryDelay", c.RedeliveryDelay)
	p.PositiveDuration("CloseTimeout", c.CloseTimeout)
	if c.MaxParked < 0 { // 0: 10 × MaxPollRecords
		p.Add("MaxParked must not be negative, got %d", c.MaxParked)
	}
	if len(c.LogEpoch) > MaxLogEpochBytes || !utf8.ValidString(c.LogEpoch) {
		p.Add("LogEpoch must be valid UTF-8 of at most %d bytes, got %d bytes", MaxLogEpochBytes, len(c.LogEpoch))
	}
	return p.Err()
}

// DefaultWorkerConfig returns a WorkerConfig with every default filled in
// (Logger, Now and Observer are left nil).
func DefaultWorkerConfig() WorkerConfig {
	var c WorkerConfig
	c.setDefaults()
	return c
}

// setDefaults fills the zero fields with the defaults (values only; the
// constructor supplies the logger, clock and observer).
func (c *WorkerConfig) setDefaults() {
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = DefaultBatchTimeout
	}
	if c.DeadLetterTimeout == 0 {
		c.DeadLetterTimeout = c.BatchTimeout / 2
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
}

// Validate reports every problem of the settings' values at once
// (NewWorker also needs the topics). Call it on a defaulted config.
func (c WorkerConfig) Validate() error {
	var p check.Problems
	p.Positive("MaxBatch", c.MaxBatch)
	p.PositiveDuration("BatchTimeout", c.BatchTimeout)
	p.PositiveDuration("DeadLetterTimeout", c.DeadLetterTimeout)
	p.Positive("MaxAttempts", c.MaxAttempts)
	return p.Err()
}

// DefaultQueueConfig returns a QueueConfig with every default filled in.
func DefaultQueueConfig() QueueConfig {
	var c QueueConfig
	c.setDefaults()
	return c
}

// setDefaults fills the zero fields with the defaults.
func (c *QueueConfig) setDefaults() {
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
}

// Validate reports every problem of the settings' values at once
// (NewQueue also needs the topic). Call it on a defaulted config.
func (c QueueConfig) Validate() error {
	var p check.Problems
	p.PositiveDuration("PublishTimeout", c.PublishTimeout)
	return p.Err()
}
