package faults

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// Environment of the suite.
const (
	envRun         = "SINK_FAULTS"              // 1 runs the suite (make test-faults)
	envTrials      = "SINK_FAULTS_TRIALS"       // e.g. worker-sigkill=20,db-pause=5
	envRequireOnce = "SINK_FAULTS_REQUIRE_ONCE" // 0: only report mutations applied twice (default: fail on them)
	envReport      = "SINK_FAULTS_REPORT"       // file for the markdown table
	envSeed        = "SINK_FAULTS_SEED"         // random seed of the fault points
	envHold        = "SINK_FAULTS_HOLD"         // internal: the interrupt test's child
	envSinkSource  = "SINK_FAULTS_SINK_SOURCE"  // build Sink from this tree instead of this repository
	envLogLevel    = "SINK_FAULTS_LOG_LEVEL"    // SINK_LOG_LEVEL of the containers (default warn)
	envMongoImage  = "SINK_FAULTS_MONGO_IMAGE"  // MongoDB image used when present locally (default mongo:7)
	envStatic      = "SINK_FAULTS_STATIC"       // 1: workers are static group members (SINK_KAFKA_INSTANCE_ID)
	envDB          = "SINK_FAULTS_DB"           // database of the run: mongo (default) or postgres
	envSweepStale  = "SINK_FAULTS_SWEEP_STALE"  // 0: leave the objects of earlier runs alone (other developers share the engine)
)

// suite is the process-wide state: the engine (nil without Docker) and why
// the suite does not run.
var suite struct {
	once   sync.Once
	eng    *engine
	reason string
	live   atomic.Pointer[engine] // eng, for the signal handler
}

// initSuite connects to the engine and sweeps what killed earlier runs left,
// or records why the suite does not run.
func initSuite() {
	if os.Getenv(envRun) != "1" {
		suite.reason = "the container fault suite runs with " + envRun + "=1 (make test-faults)"
		return
	}
	e, err := connectEngine()
	if err != nil {
		suite.reason = "fault suite skipped: " + err.Error()
		return
	}
	// SINK_FAULTS_SWEEP_STALE=0 leaves the objects of earlier runs alone,
	// whatever their process looks like from here (a shared engine).
	if os.Getenv(envSweepStale) != "0" {
		if err := sweepStale(e.dc); err != nil {
			fmt.Fprintf(os.Stderr, "faults: removing objects of earlier runs: %v\n", err)
		}
	}
	suite.eng = e
	suite.live.Store(e)
}

// suiteEngine returns the engine, or skips the test with the reason.
func suiteEngine(t *testing.T) *engine {
	t.Helper()
	suite.once.Do(initSuite)
	if suite.eng == nil {
		t.Skip(suite.reason)
	}
	return suite.eng
}

// TestMain removes everything the suite created when the tests end, and on
// SIGINT or SIGTERM (then it exits with status 130 or 143).
func TestMain(m *testing.M) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "faults: %v: removing the containers, networks and images of this run\n", sig)
		code := 130
		if sig == syscall.SIGTERM {
			code = 143
		}
		if e := suite.live.Load(); e != nil {
			if err := e.cleanup(); err != nil {
				fmt.Fprintf(os.Stderr, "faults: cleanup: %v\n", err)
				code = 1
			}
		}
		os.Exit(code)
	}()
	if os.Getenv(envRun) == "1" {
		suite.once.Do(initSuite)
		if suite.eng == nil {
			// make test-faults without a Docker engine: one line, no failure.
			fmt.Println(suite.reason)
			os.Exit(0)
		}
	}
	code := m.Run()
	signal.Stop(sigs)
	if suite.eng != nil {
		if err := suite.eng.cleanup(); err != nil {
			fmt.Fprintf(os.Stderr, "faults: cleanup: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
