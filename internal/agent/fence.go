package agent

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
)

// Self-fencing (Config.SelfFence; docs/postgres.md, "At most one running
// attempt"). The server declares a node lost, and requeues its replicas
// elsewhere, once it has not heard the node for its heartbeat timeout H,
// measured from the arrival of the node's last sync. The agent measures
// from when it sent the last sync the server answered, which is earlier,
// and moves the node's fence (supervisor.Fence) to:
//
//	stop at  sent + H·3/4   each replica gets its stop signal
//	kill at  sent + H·11/12 what is left is killed (SIGKILL)
//
// so every replica of a node the server gives up is dead before the server
// can start it again elsewhere, whether the agent lives (a partition, a
// server that cannot answer) or not (the fence is enforced by the
// supervisors, which outlive the agent). The bound holds as long as the two
// machines' clocks run at the same rate (not the same time: each side
// measures a duration on its own clock) and a killed process is gone within
// H/12 (5 s at the default 60 s).
//
// A launch waits while the fence is near (awaitFence): a replica handed to
// its supervisor later than H/2 after the last answered sync was sent
// would risk being refused at the fence before its command starts (an
// attempt lost without having run, retried elsewhere, under a load that
// delays the server's answers), so it waits for the next answer instead.
// The server still has it in the node's desired set; if the server gives
// the node up meanwhile, the answer after re-registering drops it and it is
// reported stopped, never started.
//
// The cost: a replica runs only while its node hears from the control plane
// at least every H·3/4 (45 s at the default). A failover (about 6–10 s) or
// a quick server restart fits; a longer outage stops the node's replicas,
// which the server then requeues. Operators who prefer that replicas run on
// through long outages, at the risk of a second copy when a node is given
// up while alive, raise --heartbeat-timeout or run agents with --fence=false.
const (
	fenceStopNum, fenceStopDen = 3, 4
	fenceKillNum, fenceKillDen = 11, 12
)

// fenceFor is the fence after a sync sent at sent that the server answered,
// under heartbeat timeout h.
// sentBoot is the boot clock's reading at sent (supervisor.BootTime).
func fenceFor(sent time.Time, sentBoot, h time.Duration) supervisor.Fence {
	return supervisor.Fence{
		StopAt: sent.Add(h * fenceStopNum / fenceStopDen), StopBoot: sentBoot + h*fenceStopNum/fenceStopDen,
		KillAt: sent.Add(h * fenceKillNum / fenceKillDen), KillBoot: sentBoot + h*fenceKillNum/fenceKillDen,
	}
}

// fenceRetry caps the back-off between failed syncs while the agent fences
// itself: a server that returns (a restart shorter than H·3/4) is heard
// again before the fence stops anything, rather than after a 30 s back-off.
func fenceRetry(h time.Duration) time.Duration { return max(h/12, 100*time.Millisecond) }

// fenceWait caps a sync's long-poll wait while the agent fences itself, so
// that a wait and a call given up still leave room for the next server.
func fenceWait(h time.Duration) time.Duration { return h / 6 }

// fencing reports whether the agent fences itself: configured to, and told
// the server's heartbeat timeout.
func (a *Agent) fencing() bool { return a.cfg.SelfFence && a.lostAfter > 0 }

// renewFence moves the node's fence forward after a sync sent at sent
// (sentBoot on the boot clock, which the supervisors read) was answered. Writes closer together than the supervisors read the fence
// are skipped. A failed write leaves the old fence, which stops replicas
// early, never late.
func (a *Agent) renewFence(sent time.Time, sentBoot time.Duration) {
	if !a.fencing() {
		return
	}
	f := fenceFor(sent, sentBoot, a.lostAfter)
	if !a.fence.StopAt.IsZero() && f.StopAt.Sub(a.fence.StopAt) < time.Second {
		return
	}
	if err := supervisor.WriteFence(a.replicas, f); err != nil {
		a.log.Error("moving the node's fence forward; its replicas stop at the old one", "err", err, "stop_at", a.fence.StopAt)
		return
	}
	a.fence = f
}

// releaseLaunches lets launches held at the fence (awaitFence) go on under
// its current position. The sync loop calls it after it has applied the
// answer that moved the fence, never before: a held replica the answer
// dropped is then already marked stopped when its launch wakes, and is
// reported stopped without being started.
func (a *Agent) releaseLaunches() {
	if !a.fencing() || a.fence.StopAt.IsZero() {
		return
	}
	by := a.fence.StopBoot - a.lostAfter*fenceLaunchNum/fenceLaunchDen
	a.mu.Lock()
	defer a.mu.Unlock()
	if by == a.launchBy {
		return
	}
	a.launchBy = by
	close(a.fenceMoved)
	a.fenceMoved = make(chan struct{})
}

// fenceLaunchNum/fenceLaunchDen·H before the fence's stop, launches wait
// for the fence to move (awaitFence): a supervisor then has at least that
// long to start its command before the fence would refuse it.
const fenceLaunchNum, fenceLaunchDen = 1, 4

// launchPoll is how often a launch waiting at the fence looks whether the
// server still wants it.
const launchPoll = 200 * time.Millisecond

// awaitFence returns once a replica may be launched under the node's
// fence: there is none, or its stop is more than H/4 away. Otherwise it
// waits for the next answered sync to move the fence, for stopped to
// report that the server no longer wants the replica (admit then reports
// it stopped without starting it), or for ctx to end (it returns false).
func (a *Agent) awaitFence(ctx context.Context, stopped func() bool, log *slog.Logger) bool {
	logged := false
	for {
		a.mu.Lock()
		by, moved := a.launchBy, a.fenceMoved
		a.mu.Unlock()
		if by == 0 || supervisor.BootTime() < by || stopped() {
			if logged {
				log.Info("the fence moved; launching the replica")
			}
			return true
		}
		if !logged {
			log.Warn("holding a launch: no answer from the control plane for a while, and a replica started now could be fenced before it runs; launching once it answers")
			logged = true
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return false
		case <-time.After(launchPoll):
		}
	}
}

// dropFence removes the node's fence, for an agent that does not fence
// itself: a fence left by an earlier run must not stop its replicas.
func (a *Agent) dropFence() error {
	err := os.Remove(filepath.Join(a.replicas, supervisor.FenceFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
