package bootstrap

import "github.com/sink-io/sink/bootstrap/envconfig"

// Config is every setting of a Sink process, read from the environment
// (bootstrap/envconfig maps the SINK_* variables onto it).
type Config = envconfig.Config

// Modes (SINK_MODE).
const (
	ModeServer = envconfig.ModeServer
	ModeWorker = envconfig.ModeWorker
	ModeAll    = envconfig.ModeAll
)

// LoadConfig reads the configuration from environ (os.Environ() when nil)
// and validates it, reporting every problem at once.
func LoadConfig(environ map[string]string) (Config, error) { return envconfig.Load(environ) }
