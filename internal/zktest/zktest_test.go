package zktest_test

import (
	"testing"
	"time"

	"github.com/slotd/slotd/internal/zktest"
)

// A three-member ensemble elects a leader, and elects another when the
// leader is killed.
func TestEnsembleElects(t *testing.T) {
	e := zktest.Start(t, 3)
	l := e.WaitLeader(10 * time.Second)
	l.Stop()
	if n := e.WaitLeader(30 * time.Second); n == l {
		t.Fatal("the killed member still leads")
	}
}
