package supervisor

import (
	"path/filepath"
	"time"
)

// FenceFile is the node's fence (Fence), in the directory that holds the
// replica directories: one file for every supervisor of the node. Its name
// starts with a dot, which no replica id does.
const FenceFile = ".fence.json"

// fencePoll is how often a supervisor reads the fence while its child
// runs.
const fencePoll = time.Second

// Fence bounds how long the node's replicas may run without the agent
// hearing from the control plane (the agent's self-fencing; docs/postgres.md,
// "At most one running attempt"). The agent moves it forward after each
// sync the server answered; a supervisor that finds StopAt passed ends its
// child as a stop would (its signal, then SIGKILL after its grace period,
// but never later than KillAt), and one that finds KillAt passed kills the
// child at once. A child is not started once StopAt has passed. Times are
// the wall clock, which the agent and its supervisors share. Without the
// file a supervisor runs its child unfenced (an agent run with fencing off).
type Fence struct {
	StopAt time.Time `json:"stopAt"`
	KillAt time.Time `json:"killAt"`
}

// WriteFence replaces the fence of the replicas under replicasDir.
func WriteFence(replicasDir string, f Fence) error {
	return writeJSON(filepath.Join(replicasDir, FenceFile), f)
}

// ReadFence reads the fence that covers the replica directory dir; ok is
// false when there is none.
func ReadFence(dir string) (f Fence, ok bool, err error) {
	ok, err = readJSON(filepath.Join(filepath.Dir(dir), FenceFile), &f)
	return f, ok, err
}
