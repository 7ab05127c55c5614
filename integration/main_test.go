package integration_test

import (
	"testing"

	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/internal/testkit/pgtest"
)

// TestMain closes the shared MongoDB-wire test server after the tests.
func TestMain(m *testing.M) { pgtest.Main(m, mongotest.CloseShared) }
