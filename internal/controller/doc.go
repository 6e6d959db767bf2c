// Package controller is gpufleet's control loop and the owner of its
// in-memory state (DESIGN.md §1, §3). It accepts jobs, takes snapshots, calls
// the pure scheduler, commits the plan's bindings where the jobs and GPUs they
// touch are unchanged since the snapshot, serves agents their desired
// replicas, and turns what agents report into attempt and job transitions.
//
// Every change follows one path: under the controller's mutex the change is
// checked against the current state, applied to memory and queued to the
// store; the caller then waits until the store has made it durable. Batches
// become durable in the order they were queued, so the disk always holds a
// prefix of the changes memory has seen, and nothing is shown to an agent
// before it is durable. A store failure stops the controller: memory would
// otherwise be ahead of the truth on disk.
//
// Concerns that need not share the scheduling state's mutex are components
// in packages of their own, each guarding its state with its own lock:
// telemetry (GPU samples, efficiency verdicts, recent alerts), notify (the
// webhook outbox and its delivery), revisions (the fleet's revision log),
// ledger (the cost ledger's views) and budgets (what the budget passes
// decided). The lock order is the
// controller's mutex first, then a component's; components never call
// back into the controller, so readers of a component (the API's revision
// list, cost reports, alerts) never wait on a scheduling pass or an agent
// sync. Components keep memory only: what they change reaches the store in
// the controller's batches, through the one committer, so the ordering and
// crash guarantees above hold for them too.
//
// Identity (tokens, job tokens, sessions, grants; package identity), the
// audit chain (auditlog) and the sealed secrets (vault) are components with
// their own locks, so authenticating a request, appending an audit entry or
// reading a secret never waits for a scheduling pass, a plan commit or an
// agent sync. The lock order is the controller's mutex first, then a
// component's; a component never calls back into the controller while it
// holds its own (the vault's delete guard runs without it). The components
// share the controller's committer: each submits its batches under its own
// lock, so within each the store's order is the order of memory, and the
// committer numbers all of them in one sequence, so a barrier covers them
// too. A batch is encoded before the committer's own lock; a submission
// (and an audit entry) goes further: its place in the sequence is reserved
// under the locks and the batch encoded and given after they are released
// (committer.reserve, fill), later batches waiting for the place. Where the
// scheduler needs them it calls them with its mutex held: a
// replica's job token is minted into the sync's batch, a finished job's
// tokens are revoked in the batch that ends it, and a submission's audit
// entry is chained while the job's place is reserved (auditlog.Chain), so
// each is one commit with the change it belongs to.
//
// The services manager (package services, outside this one) owns the
// services the store held at start (StoredServices) and writes them
// through the same committer (Committer), so they are fenced and ordered
// like every other change. It calls the controller and the vault (its
// replica keys, the API keys of its services) only without its own lock
// held.
package controller
