// Package sqlite is the embedded store.Store: one SQLite file (pure Go,
// modernc.org/sqlite) under the data directory, in WAL mode with
// synchronous=FULL.
//
// It owns that file: its schema, the numbered migrations embedded from
// migrations/ and recorded in schema_migrations, and the encoding of each
// object as JSON beside the few columns SQL needs (keys, version, seq).
//
// Invariants:
//   - A batch is acknowledged (its Submit channel yields nil) only after the
//     transaction holding it has committed and been synced to disk.
//   - Batches commit in Submit order. One committer goroutine writes; it
//     groups every batch queued while the previous commit ran into the next
//     transaction (group commit), so concurrent callers share one fsync.
//   - Each batch is atomic and isolated within its group: a batch that fails
//     is rolled back alone and only its caller sees the error. A failed
//     transaction fails every batch in it.
//   - Jobs, attempts and nodes are replaced only by an equal or higher
//     Version, so a late write never rolls an object back.
//   - A database whose schema is newer than this binary is never written.
//   - Every transaction bumps the commit count in store_commits; the same
//     count is written and synced to the mark file beside the database
//     (MarkSuffix) after the commit and before its batches are
//     acknowledged, so the mark is never above a healthy database. Open
//     refuses a database below its mark (LostWritesError) before writing it.
//
// Open does not stop a second process from opening the same file, so
// callers must not: each process's controller keeps its own truth in memory,
// and two writers would overwrite each other.
package sqlite
