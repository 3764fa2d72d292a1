package kv

import (
	"context"
	"fmt"

	"github.com/slotd/slotd/lock"
)

// PlantTriggerKeys writes keys as task's idempotency keys, oldest first,
// each taken at unix second sec, in one write of the entry Controls.Trigger
// keeps (with no trigger pending); task must have no entry yet. It is for
// the conformance suite (locktest's Harness.PlantTriggerKeys), which fills a
// task up to lock.MaxTriggerKeys with it rather than with one trigger per
// key: a thousand compare-and-sets on a store of three members take tens
// of seconds. slotd itself never calls it.
func PlantTriggerKeys(ctx context.Context, s Store, task string, sec int64, keys []string) error {
	var t triggerValue
	for _, k := range keys {
		t.keys = append(t.keys, idemKey{sec, k})
	}
	ok, err := s.Put(ctx, triggersDir, task, t.encode(), 0, lock.TriggerTTL)
	if err == nil && !ok {
		err = fmt.Errorf("the entry exists")
	}
	if err != nil {
		return fmt.Errorf("kv: plant %d trigger keys of %s (%s/%s): %w", len(keys), task, triggersDir, task, err)
	}
	return nil
}
