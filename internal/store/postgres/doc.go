// Package postgres is the replicated store.Store: the control plane's
// objects in a PostgreSQL database (jackc/pgx/v5), for teams that run
// several server replicas or want the database on a managed, replicated
// service. It keeps what the SQLite store keeps, in the same tables with
// the same encoding (internal/store/encode), and adds leases
// (store.Leaser) with epoch fencing.
//
// It owns the database's schema: the numbered migrations embedded from
// migrations/, recorded in schema_migrations and applied under an advisory
// lock, so replicas starting together migrate once.
//
// Invariants:
//   - A batch is acknowledged only after the transaction holding it has
//     committed; PostgreSQL's synchronous_commit decides where that is
//     durable (on the primary's disk, or also on synchronous standbys). A
//     session with synchronous_commit off is switched on.
//   - Batches commit in Submit order, grouped as in the SQLite store
//     (package groupcommit): one transaction per group, sent as one
//     pipeline. A batch that fails is retried alone in its own savepoint,
//     so only its caller sees the error; a failed transaction fails every
//     batch in it.
//   - Jobs, attempts, nodes and queues are replaced only by an equal or
//     higher Version.
//   - Audit and ledger rows are never updated or deleted: triggers refuse
//     it from every role.
//   - A fenced batch commits only if its lease is still at its epoch and
//     holder, checked in the same transaction under a share lock on the
//     lease row, so a takeover (Acquire) waits for it or it sees the new
//     epoch and fails with a *store.FencedError: nothing of a stale
//     writer's batch commits after a new term began.
//   - A database whose schema is newer than this binary is never written.
//   - Unless Options.Shared, one Store at a time writes a database: the
//     committer's session holds an advisory lock, and Open fails with
//     ErrInUse while another holds it.
//
// The DSN's password never reaches a log or an error: Describe prints a
// DSN without it.
package postgres
