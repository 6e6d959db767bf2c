// Package agent is the node agent (DESIGN.md §3 "Run", §4 "Agent
// protocol"): it registers its node with the control plane, pulls the
// desired set of replicas, runs each under its own supervisor process
// (package supervisor), ships their output, and reports how they end.
//
// The agent's directory (Config.Dir) is its durable state:
//
//	agent.lock                 held (flock) while an agent runs on the directory
//	node-id                    the id the server gave this node; reused when re-registering
//	replicas/<replica-id>/     one per replica ever started: the supervisor's files
//	                           (spec.json, pid.json, output.log, exit.json, supervisor.log)
//	                           and acked, an empty marker once the server has recorded
//	                           the replica's end and the agent has forgotten it
//
// Invariants:
//   - A replica directory is created, and spec.json written durably, before
//     its supervisor is launched; a replica id whose directory exists is never
//     started again, whatever the server asks. It is adopted instead.
//   - Workloads never depend on the agent or the server being up: supervisors
//     run detached and record exits on disk. A restarted agent re-adopts every
//     directory not marked acked: exit.json present → exited; supervisor alive
//     (pid and start time) → running; otherwise → lost, and any process of
//     the replica still alive is killed.
//   - A replica is reported exited (or lost) only after its whole output.log
//     has been shipped and the server acknowledged EOF, so a client that sees
//     the end can read the complete log.
//   - A finished replica is reported in every sync until a response that
//     answers a report of its end no longer lists it; then it is acked.
//   - Sync and log errors are retried with capped, jittered exponential
//     backoff on the Clock; nothing is stopped because the server is away.
//   - On an isolating agent a service replica's port on the host is the
//     agent's gate (package gate, servicegate.go), open from before the
//     replica starts until its end is seen (or the agent stops); the replica
//     itself listens only inside its own network namespace.
package agent
