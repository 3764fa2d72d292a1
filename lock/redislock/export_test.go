package redislock

import "github.com/slotd/slotd/lock/internal/kv"

// RedlockKV is the quorum key-value store under r's controls.
func RedlockKV(r *Redlock) kv.Store { return redlockKV{r} }
