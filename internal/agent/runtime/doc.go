// Package runtime isolates one replica's workload for the supervisor
// (DESIGN.md §6 "Workloads are untrusted"). Two runtimes sit behind one
// small interface:
//
//   - process: the workload is a process of its own process group, run as a
//     dedicated unprivileged user (Sandbox.User) in a working directory
//     outside the agent's data directory. Without a user (an agent that is
//     not root, or one started with the explicit insecure opt-in) it runs as
//     the agent's own user, and the node says so (it is not isolated).
//   - container: the workload runs in an OCI container of rootful podman
//     with runc as its OCI runtime: its GPUs only, the replica's folder and
//     the job's checkpoint folder as its only writable mounts, a read-only
//     root, no capabilities, no new privileges, its own network namespace
//     unless the agent allows the host's, its environment passed through
//     podman's own environment (never on a command line), and the container
//     named after the replica so that a restarted supervisor or agent finds it.
//
// The agent decides a replica's Sandbox before it launches the supervisor
// and writes it beside the spec (sandbox.json); the supervisor only carries
// it out. Invariants:
//   - Nothing the workload can read or write belongs to the control plane:
//     the data directory (the agent's replica records, tokens, keys, the
//     database) is never mounted and, for the process runtime, is not
//     reachable by the workload's user (mode 0700, owned by the agent).
//   - Two attempts that run at the same time on a node never share a user,
//     so one job cannot read another's files or processes; a user is handed
//     to another attempt only after every process of it is gone and the
//     folders it could write are taken back (Release).
package runtime
