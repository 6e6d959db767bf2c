// Package supervisor runs one replica of one attempt as a process of its own,
// so the workload survives a crash or restart of the agent and the server
// (kill -9 included), and leaves a record on disk from which a restarted
// agent can re-adopt it or account for it.
//
// The agent starts `gpufleet supervise --dir DIR` detached (new session,
// stdin /dev/null, stdout and stderr to DIR/supervisor.log); the command's
// body is Run. The supervisor owns the replica directory's layout:
//
//	spec.json       the agentapi.ReplicaSpec; written by the agent (WriteSpec) before launch
//	pid.json        PIDs: the supervisor, then also the child; written by the supervisor
//	output.log      the child's stdout and stderr, appended, in one file
//	exit.json       Exit: how the child ended; written once, last
//	supervisor.log  the supervisor's own log
//
// Invariants:
//   - pid.json names the supervisor before the child starts, and the
//     supervisor handles SIGTERM from before it writes pid.json, so whoever
//     reads a pid there may signal it.
//   - pid.json and exit.json are replaced atomically (atomicfile); a reader
//     sees a whole record or none.
//   - exit.json is written only after the child has exited and no live
//     process remains in its process group, so once it exists output.log is
//     complete. It is the last thing the supervisor writes.
//   - A replica that could not be started still gets an exit record: code
//     127 when the program is not found, 126 for any other failure to start
//     (unreadable spec, bad workdir, not executable), as shells report them.
//     A supervisor that dies without exit.json (killed, or unable to write
//     it) is what the agent reports as lost.
//
// The child runs in its own process group with a minimal inherited
// environment: PATH, HOME, USER, LOGNAME, SHELL, LANG, LC_ALL, TZ, TMPDIR and
// LD_LIBRARY_PATH from the supervisor's own environment (PATH defaults to
// DefaultPath when unset), overridden and extended by the spec's Env, which
// the server resolves (GPUFLEET_*, CUDA_VISIBLE_DEVICES). Nothing else leaks
// from the agent. The program is looked up in that PATH, not the agent's.
//
// Ending the child — at the runtime limit or on SIGTERM to the supervisor —
// sends the spec's signal to the child's process group, waits the grace
// period, then sends SIGKILL to the group. When the child exits on its own,
// processes it left behind in its group are killed too: a replica is over
// when its main process is.
package supervisor
