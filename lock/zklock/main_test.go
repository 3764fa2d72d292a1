package zklock_test

import (
	"os"
	"testing"

	"github.com/slotd/slotd/internal/zktest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	zktest.StopShared() // the ensemble of the tests that share one (shared)
	os.Exit(code)
}
