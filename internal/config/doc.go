// Package config loads and validates slotd's configuration file (TOML,
// SPEC §4): [daemon], [redis] (one server, Sentinel, Cluster or Redlock,
// TLS files, min_replicas_ack), [etcd], [zookeeper], [http], [log],
// [plugins.http], [defaults] and every [[task]], each with its schedule
// parsed. A Config is data: config imports no engine package, knows no
// plugin and opens no store. What it cannot check by itself — a plugin's
// params, what the configured store supports — it asks a Checker
// (internal/assemble, which also builds the engine's objects from it).
//
// Guarantees:
//   - the file is read once, at most MaxFileSize bytes of it whatever kind
//     of file it is, and refused before decoding if it nests deeper than
//     MaxDepth or holds more than MaxKeys keys, so that no file makes
//     loading slow or large (checkBounds, a linear scan);
//   - the file is validated whole: every problem (unknown
//     key, wrong type, bad duration, spec, zone, plugin or parameter,
//     inconsistent policy or Redis mode, what the store cannot do) is
//     reported in one error, in file order, each naming the file, the key
//     and, for a task, the task;
//   - a Config returned without error is complete and consistent: defaults
//     are filled in, each task's policy is merged over [defaults] and
//     checked against its schedule (done_ttl covers the slot window, the
//     lease fits in done_ttl), and TLS files are read and checked;
//   - errors never quote a password or any byte of a Redis URL
//     (ParseRedisURL);
//   - it is the only package that reads TOML for the file (plugins decode
//     their own [task.params]).
//
// A Config is data: nothing in slotd changes it after load.
package config
