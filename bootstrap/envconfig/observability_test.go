package envconfig

import (
	"strings"
	"testing"
	"time"
)

func TestObservabilityDefaults(t *testing.T) {
	cfg, err := Load(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Observability
	if cfg.HTTPAddress != ":8081" || o.HealthInterval != 2*time.Second || o.HealthTimeout != time.Second || o.MetricsMaxDatasets != 100 {
		t.Fatalf("defaults: http %q %+v", cfg.HTTPAddress, o)
	}
	// "off" disables the endpoint; an empty value means the default.
	if c, err := Load(map[string]string{"SINK_HTTP_ADDRESS": "off"}); err != nil || c.HTTPAddress != HTTPDisabled {
		t.Fatalf("SINK_HTTP_ADDRESS=off: %q %v", c.HTTPAddress, err)
	}
	if c, err := Load(map[string]string{"SINK_HTTP_ADDRESS": ""}); err != nil || c.HTTPAddress != ":8081" {
		t.Fatalf("empty SINK_HTTP_ADDRESS: %q %v", c.HTTPAddress, err)
	}
}

func TestObservabilityProblemsAreReportedAtOnce(t *testing.T) {
	_, err := Load(map[string]string{
		"SINK_HTTP_ADDRESS":         "nowhere",
		"SINK_HEALTH_INTERVAL":      "0s",
		"SINK_HEALTH_TIMEOUT":       "often",
		"SINK_METRICS_MAX_DATASETS": "-3",
		"SINK_MAX_OPERATIONS":       "0",
	})
	if err == nil {
		t.Fatal("invalid configuration accepted")
	}
	for _, want := range []string{
		`SINK_HTTP_ADDRESS "nowhere" is not a host:port address`,
		"SINK_HEALTH_INTERVAL must be positive, got 0s",
		`SINK_HEALTH_TIMEOUT="often" is not a valid duration`,
		"SINK_METRICS_MAX_DATASETS must be positive, got -3",
		"SINK_MAX_OPERATIONS must be positive",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing problem %q in:\n%s", want, err)
		}
	}
	if strings.Contains(err.Error(), "SINK_HEALTH_TIMEOUT must be positive") {
		t.Errorf("an unparsable value must be reported once:\n%s", err)
	}
}

// Profiles need the endpoint that serves them.
func TestProfilingNeedsTheHTTPEndpoint(t *testing.T) {
	_, err := Load(map[string]string{"SINK_HTTP_ADDRESS": "off", "SINK_PROFILING": "true"})
	if err == nil || !strings.Contains(err.Error(), "SINK_PROFILING=true needs the HTTP operations endpoint") {
		t.Fatalf("profiles without the endpoint: %v", err)
	}
	if _, err := Load(map[string]string{"SINK_PROFILING": "true"}); err != nil {
		t.Fatalf("profiles on the default endpoint: %v", err)
	}
}
