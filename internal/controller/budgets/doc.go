// Package budgets is the controller's component for what its budget
// passes decided: the thresholds that fired (each once per period), and
// for the current period the blocks admission applies, each budget's
// spend, and the holds on queued jobs the scheduler applies
// (state.Snapshot.Holds).
//
// A State has its own lock, so budget views and metrics do not wait on
// the controller, and each pass's outcome is recorded in one step
// (Record): a reader sees one pass or the next, never half of one. It
// keeps memory only: the caller commits the new fired keys in the pass's
// batch, with the notifications and stops they cause, and New rebuilds
// the fired set from the stored keys (blocks, spend and holds are
// recomputed by the next pass).
package budgets
