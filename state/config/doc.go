// Package config is sluice's operator-facing configuration: the engines a
// deployment knows about, the buckets that order them by request length, and
// the policy attached to each bucket's engine groups.
//
// The format is YAML or JSON with snake_case keys (see examples/sluice.yaml
// and docs/decisions.md).
// [Parse] is the only supported decoder: it reports every unknown key, type
// mismatch, dropped legacy option and semantic problem at once, with paths
// such as buckets[1].groups.pd.decode.worker_ids[0]. [Document.Validate]
// checks documents built in code. [FileStore] serves a file-backed document as
// versioned [Snapshot]s and reloads it when the file changes.
//
// Documents handed out by this package are shared: callers must treat them as
// read-only and [Document.Clone] one before changing it.
package config
