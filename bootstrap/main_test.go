package bootstrap

import (
	"testing"

	"github.com/sink-io/sink/internal/testkit/pgtest"
)

// TestMain stops the PostgreSQL server the tests share (pgtest).
func TestMain(m *testing.M) { pgtest.Main(m) }
