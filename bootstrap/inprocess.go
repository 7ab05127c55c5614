package bootstrap

import (
	"context"
	"errors"
	"io"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.uber.org/fx"

	"github.com/sink-io/sink/ports"
)

// InProcessOptions configure StartInProcess.
type InProcessOptions struct {
	// Env holds SINK_* variables (the process environment is not read).
	// SINK_GRPC_ADDRESS defaults to 127.0.0.1:0 (a free loopback port) and
	// SINK_HTTP_ADDRESS to off.
	Env map[string]string
	// Storage replaces the configured storage (nil: from Env, the memory
	// store unless SINK_MONGODB_URI is set).
	Storage ports.Storage
	// Profiles are merge profiles registered beside the built-in ones.
	Profiles []ports.MergeProfile
	// LogWriter receives the process log (nil: discarded).
	LogWriter io.Writer
	// Queue, when set, carries the mutation log and the dead letters
	// instead of Kafka (QueuePubSub); Env must still configure the queue
	// (SINK_KAFKA_BROKERS, SINK_KAFKA_TOPIC, SINK_KAFKA_GROUP_ID).
	Queue *QueueTransport
	// Extra options for the fx application (tests of Sink itself).
	Extra []fx.Option
}

// QueueTransport is a Watermill Pub/Sub for QueuePubSub: the queue
// publishes to Pub, the worker subscribes to Sub and writes dead letters to
// DeadLetters.
type QueueTransport struct {
	Pub         message.Publisher
	Sub         message.Subscriber
	DeadLetters message.Publisher
}

// InProcess is a Sink assembled and started inside the calling process,
// for tests: the same modules as the binary, with its listeners on
// loopback.
type InProcess struct {
	App    *fx.App
	Config Config
	grpc   *GRPCEndpoint
	http   *HTTPEndpoint
}

// StartInProcess assembles Sink from o and starts it. Stop it with Stop.
func StartInProcess(ctx context.Context, o InProcessOptions) (*InProcess, error) {
	env := map[string]string{"SINK_GRPC_ADDRESS": "127.0.0.1:0", "SINK_HTTP_ADDRESS": "off"}
	for k, v := range o.Env {
		env[k] = v
	}
	cfg, err := LoadConfig(env)
	if err != nil {
		return nil, err
	}
	w := o.LogWriter
	if w == nil {
		w = io.Discard
	}
	log := NewLogger(cfg, w)
	p := &InProcess{Config: cfg}
	extra := append([]fx.Option{fx.Populate(&p.grpc, &p.http)}, o.Extra...)
	if q := o.Queue; q != nil {
		extra = append(extra, QueuePubSub(q.Pub, q.Sub, q.DeadLetters))
	}
	if o.Storage != nil {
		st := o.Storage
		extra = append(extra, fx.Decorate(func(ports.Storage) ports.Storage { return st }))
	}
	for _, prof := range o.Profiles {
		if prof == nil {
			return nil, errors.New("bootstrap: a nil merge profile")
		}
		extra = append(extra, fx.Provide(fx.Annotate(func() ports.MergeProfile { return prof }, fx.ResultTags(mergeProfilesGroup))))
	}
	app, err := New(cfg, log, extra...)
	if err != nil {
		return nil, err
	}
	if err := app.Start(ctx); err != nil {
		return nil, err
	}
	p.App = app
	return p, nil
}

// GRPCAddr returns the bound address of the gRPC API ("" in worker mode).
func (p *InProcess) GRPCAddr() string {
	if p.grpc == nil || p.grpc.Addr() == nil {
		return ""
	}
	return p.grpc.Addr().String()
}

// HTTPAddr returns the bound address of the HTTP operations endpoint (""
// when SINK_HTTP_ADDRESS=off).
func (p *InProcess) HTTPAddr() string {
	if p.http == nil || p.http.Addr() == nil {
		return ""
	}
	return p.http.Addr().String()
}

// Stop stops Sink (draining calls in flight within ctx).
func (p *InProcess) Stop(ctx context.Context) error { return p.App.Stop(ctx) }
