// Package redislock is slotd's slot protocol (lock.Store) on Redis: one
// server, Sentinel or Cluster (New), or a Redlock quorum of independent
// masters (NewRedlock). Each state change is one Lua script, one file per
// script, that checks ownership before it writes; concurrent calls are
// pipelined and fused (see batcher). It also implements the optional
// capabilities: operator controls (lock.Controls), the fleet (lock.Fleet),
// one-time markers (lock.Oncer) and the write probe (lock.Prober). It
// classes Redis's refusals (OOM, NOPERM, READONLY, MISCONF, NOREPLICAS) as
// lock.StoreError with the fix to name. Beside the slots it keeps the run
// history (History: a capped stream per task, read by history_read.lua;
// MultiHistory on every Redlock master) and reads the servers' eviction
// policy (CheckEviction).
//
// It is the one owner of slotd's Redis schema. Keys (prefix "slotd"; the
// braces are a Redis Cluster hash tag so one slot's keys share a shard):
//
//	slotd:{<task>:<slot id>}           "run:<owner>:<attempt>" (TTL lease) or
//	                                   "done:<owner>:<attempt>:<unix ms>" (TTL done TTL);
//	                                   <owner> is "<replica>#<instance nonce>" (see lock.Value)
//	slotd:{<task>:<slot id>}:attempts  INCR per claim (TTL >= done TTL)
//	slotd:{<task>:<slot id>}:base      attempts before the last operator rerun, if any
//	slotd:{<task>:<slot id>}:once:<event>  a one-time marker (see OnceKey)
//	slotd:probe:{<replica>}            the replica id, written by Probe with a TTL
//	slotd:released                     pub/sub channel: a slot was released or rerun; message = state key
//	slotd:done                         pub/sub channel: "fleet" (the live set changed, fleet.go); under
//	                                   WithMinReplicasAck, a slot was marked done (message = its state key);
//	                                   a replica from before 2026-11-30 also sent every completion's state
//	                                   keys, one a line, and won claims ("taken", then state keys)
//	slotd:fleet                        see fleet.go
//	slotd:replica:{<replica id>}       see fleet.go
//	slotd:first-start                  see fleet.go
//	slotd:history:{<task>}             the task's run history, a stream (HistoryKey, history.go)
//
// and the operator controls' keys (see redis_controls.go and ControlKeys;
// on a Redlock quorum, redlock_controls.go and redlock_kv.go).
// The in-memory store (package memlock) mirrors this layout step for step.
package redislock
