// Package model holds the plain data types every gpufleet package shares:
// jobs and their specs, attempts, nodes and GPUs, offers, money and the cost
// ledger's rows (LedgerEntry, FiredKey: what the store persists for package
// cost), and the field-path errors that validation returns. It depends on the standard library only and
// does no I/O.
//
// Objects that the controller keeps in memory (Job, Attempt, Node) are treated
// as immutable once published: a change makes a copy with a higher Version, so
// a Snapshot can share pointers with the live state safely.
package model
