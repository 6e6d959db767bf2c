// Package scheduler decides where pending jobs run. It is pure: Schedule reads
// an immutable state.Snapshot and the offers that could be bought, and returns
// a Plan; it does no I/O, reads no clock and starts no goroutines. The same
// snapshot, offers, time and seed always give the same Plan.
//
// A pass (see Schedule for the numbered steps) orders queues by weighted
// dominant share (current allocation plus usage decayed over a half-life),
// jobs inside a queue by aged priority then age; admits within nominal quota
// or by borrowing from the cohort up to a borrowing limit; places every
// replica or none on the best-scoring node of a node class (nodes of one
// shape, unique labels such as the address aside, kept in buckets by
// free-GPU count, so placement never scans the fleet); backfills later jobs
// around reservations of blocked ones (EASY); preempts the fewest victims by
// work lost (in-queue priority, or reclaim of borrowed quota); and ranks
// offers by expected cost to finish for what the
// fleet cannot hold. "Does not fit" is a verdict with reasons, never an
// error.
//
// Invariants of every Plan: no GPU is bound twice or beyond a whole GPU when
// shared, a job's replicas are bound together or not at all, a job is bound
// at most once, and no queue goes above its nominal quota except by borrowing
// within its limit from what its cohort's other members own.
//
// Work per pass is bounded by the pending jobs and the node classes, not by
// their product with the live attempts: preemption reads bounded prefixes of
// per-class victim lists under per-pass caps, and blocked jobs of one shape
// share their reason lists (see preempt and capacityReasons). Behind a
// full fleet most of a deep queue is blocked: a blocked job's turn is
// reused by later jobs it reads alike while nothing it reads has changed
// (turn.go), and jobs of one shape share their offers (fitOffers). A
// Memory (memory.go), which the controller's passes use, keeps what a pass
// derives from each queued job alone (class, runtime, shape and its
// fitKey, back-off and enqueue times) from one pass to the next, keyed by
// the job's record and version, so a job that waits costs a lookup, not a
// read of its spec, in every pass; a pass over the very pending records
// of the last (Snapshot.PendingGen) takes them whole, and while no record
// is changed in place (Snapshot.InPlaceGen) a pass copies the jobs of the
// records it shares with the last, without a lookup; its plans are
// Schedule's. Verdicts are filled by each job's
// place in the pending list and indexed by id only when someone asks.
package scheduler
