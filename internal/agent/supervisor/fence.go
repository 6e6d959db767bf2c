package supervisor

import (
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
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
// child at once. A child is not started once StopAt has passed. Without the
// file a supervisor runs its child unfenced (an agent run with fencing off).
//
// The deadlines that count are StopBoot and KillBoot, readings of the
// machine's boot clock (CLOCK_BOOTTIME: it runs on through suspend and is
// never stepped), which the agent and its supervisors share: a wall-clock
// step (NTP, a resumed VM) neither fences a healthy node early nor lets a
// cut-off one run late. StopAt and KillAt are the same deadlines on the wall
// clock, for people and logs; a fence without boot readings (written by an
// older agent) falls back to them.
type Fence struct {
	StopAt   time.Time     `json:"stopAt"`
	KillAt   time.Time     `json:"killAt"`
	StopBoot time.Duration `json:"stopBoot,omitempty"`
	KillBoot time.Duration `json:"killBoot,omitempty"`
}

// BootTime reads the boot clock (CLOCK_BOOTTIME).
func BootTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("reading CLOCK_BOOTTIME: " + err.Error()) // Linux has had it since 2.6.39
	}
	return time.Duration(ts.Nano())
}

// Stopped reports whether the fence's stop has passed.
func (f Fence) Stopped() bool {
	if f.StopBoot > 0 {
		return BootTime() >= f.StopBoot
	}
	return !time.Now().Before(f.StopAt)
}

// untilStop is how long until the fence's stop (negative once passed).
func (f Fence) untilStop() time.Duration {
	if f.StopBoot > 0 {
		return f.StopBoot - BootTime()
	}
	return time.Until(f.StopAt)
}

// Kill returns the kill deadline on this process's clock (time.Now plus
// what is left of it on the boot clock).
func (f Fence) Kill() time.Time {
	if f.KillBoot > 0 {
		return time.Now().Add(f.KillBoot - BootTime())
	}
	return f.KillAt
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
