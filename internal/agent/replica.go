package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"syscall"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/gate"
	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// shipBurst is how many log chunks a replica ships per round while it
// runs, so that a backlog does not delay noticing its exit or a stop.
const shipBurst = 16

// replica is one tracked replica. Its files are the truth; the agent's
// view is re-derived from them every PollInterval by the replica's own
// goroutine (tend).
type replica struct {
	id  string
	dir string // empty for one refused or stopped before it had a directory
	// attempt is the attempt the replica belongs to; its workload user is
	// the attempt's (empty for one refused before it had a sandbox).
	attempt string
	// since is when this agent launched or adopted the replica; a supervisor
	// without a pid record by since+StartTimeout is taken for lost.
	since time.Time
	// launched is the supervisor this agent launched; nil for adopted
	// replicas, which are only polled.
	launched *launched
	// wake prompts tend to act on a stop request now.
	wake chan struct{}

	// Guarded by Agent.mu.
	status agentapi.ReplicaStatus // Phase empty while there is nothing to report
	// seen is when tend last saw the running replica's process alive: its
	// status's ObservedAt in the next sync (request). Zero until then.
	seen time.Time
	stop bool
	ckpt *ckptState // its checkpoint sync, set at most once (setCheckpoints)
	gate *gate.Gate // a service replica's gate while it may run (servicegate.go)
}

// launched is a supervisor process this agent started.
type launched struct {
	proc *os.Process
	done <-chan struct{} // closed once it has exited and been reaped
}

// wait returns a channel closed when the supervisor has exited; for nil, a
// channel that never closes.
func (l *launched) wait() <-chan struct{} {
	if l == nil {
		return nil
	}
	return l.done
}

// exited reports whether the supervisor has exited; nil never has, as far
// as this agent knows.
func (l *launched) exited() bool {
	if l == nil {
		return false
	}
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

func (a *Agent) newReplica(id, attempt, dir string, l *launched) *replica {
	return &replica{id: id, attempt: attempt, dir: dir, since: a.cfg.Clock.Now(), launched: l, wake: make(chan struct{}, 1)}
}

// track adds r to the tracked replicas and starts tending it.
func (a *Agent) track(ctx context.Context, r *replica) {
	a.mu.Lock()
	a.tracked[r.id] = r
	a.mu.Unlock()
	a.tending.Go(func() { a.tend(ctx, r) })
}

// trackEnded tracks a replica that ended before it could run, with phase
// and reason. It is reported at once.
func (a *Agent) trackEnded(ctx context.Context, id, dir string, phase agentapi.Phase, reason string) *replica {
	r := a.newReplica(id, "", dir, nil)
	now := a.cfg.Clock.Now()
	r.status = agentapi.ReplicaStatus{ID: id, Phase: phase, Reason: reason, EndedAt: &now}
	a.mu.Lock()
	a.tracked[id] = r
	a.mu.Unlock()
	ring(a.changed)
	return r
}

// launch writes the spec and sandbox and starts a detached supervisor on dir.
func (a *Agent) launch(dir string, spec agentapi.ReplicaSpec, sb runtime.Sandbox) (*launched, error) {
	// The checkpoint sync's credentials and data key stay in memory.
	spec.Checkpoint = nil
	spec.Data = nil // its credentials too; the sandbox records the mounts
	if err := supervisor.WriteSpec(dir, spec); err != nil {
		return nil, fmt.Errorf("writing replica spec: %w", err)
	}
	if err := supervisor.WriteSandbox(dir, sb); err != nil {
		return nil, fmt.Errorf("writing replica sandbox: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, supervisor.LogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening supervisor log: %w", err)
	}
	defer logf.Close()
	argv := append(slices.Clone(a.cfg.SupervisorCommand), dir)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A session of its own: no terminal signals, and it outlives the agent.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting supervisor: %w", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait() // reap it; how the replica ended is in exit.json
		close(done)
	}()
	return &launched{proc: cmd.Process, done: done}, nil
}

// requestStop asks for r to be stopped; tend signals its supervisor.
func (a *Agent) requestStop(r *replica) {
	a.mu.Lock()
	already := r.stop
	r.stop = true
	a.mu.Unlock()
	if !already {
		ring(r.wake)
	}
}

// publish sets what is reported for r, and wakes the sync loop on change;
// seen, when set, is when r's process was last seen alive (observation).
// seen alone is no change: it moves with every look.
func (a *Agent) publish(r *replica, s agentapi.ReplicaStatus, seen time.Time) {
	a.mu.Lock()
	changed := !reflect.DeepEqual(r.status, s)
	r.status = s
	if !seen.IsZero() {
		r.seen = seen
	}
	a.mu.Unlock()
	if changed {
		ring(a.changed)
	}
}

// tend follows one replica until it has ended and its log is shipped, or
// ctx ends: it observes the replica's files and processes, reports what it
// sees, relays a stop request to the supervisor, and ships new output.
func (a *Agent) tend(ctx context.Context, r *replica) {
	log := a.log.With("replica_id", r.id)
	ship := &shipper{
		cp:        a.cfg.ControlPlane,
		nodeID:    a.nodeID,
		replicaID: r.id,
		path:      filepath.Join(r.dir, supervisor.OutputFile),
		chunkSize: int64(a.cfg.LogChunkSize),
	}
	retry := a.newBackoff()
	var retryAt time.Time
	tick := a.cfg.Clock.NewTicker(a.cfg.PollInterval)
	defer tick.Stop()
	signalled := false
	var watch *watcher
	defer func() { watch.end() }()
	for ctx.Err() == nil {
		if ck := a.checkpointsOf(r); ck != nil && watch == nil {
			watch = startWatch(ctx, ck)
		}
		obs := a.observe(r, log)
		if ended(obs.status.Phase) {
			// Its port is free before its end is reported, for the
			// replica that replaces it.
			a.closeGate(r)
			// The last checkpoint is uploaded before the end is
			// reported: the attempt that resumes the job must find it.
			watch.end()
			a.finalUpload(ctx, a.checkpointsOf(r), log)
			a.finish(ctx, r, withCheckpoint(obs.status, a.checkpointsOf(r)), ship, log)
			return
		}
		if obs.status.Phase != "" {
			a.publish(r, withCheckpoint(obs.status, a.checkpointsOf(r)), obs.seen)
		}
		a.mu.Lock()
		stop := r.stop
		a.mu.Unlock()
		if stop && !signalled && obs.pids != nil {
			signalled = signalStop(obs.pids.Supervisor, log)
		}
		more := false
		if now := a.cfg.Clock.Now(); !now.Before(retryAt) {
			var err error
			if more, err = ship.ship(ctx, false, shipBurst); err != nil {
				more = false
				d := retry.next()
				retryAt = now.Add(d)
				log.Warn("shipping replica output", "err", err, "retry_in", d)
			} else {
				retry.reset()
			}
		}
		if more {
			continue
		}
		select {
		case <-ctx.Done():
		case <-tick.C():
		case <-r.wake:
		case <-r.launched.wait():
		}
	}
}

// finish ships the rest of an ended replica's output with EOF, retrying
// until the server has it, and only then reports the end.
func (a *Agent) finish(ctx context.Context, r *replica, status agentapi.ReplicaStatus, ship *shipper, log *slog.Logger) {
	retry := a.newBackoff()
	for {
		_, err := ship.ship(ctx, true, 0)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return // the next run ships it
		}
		d := retry.next()
		log.Warn("shipping replica output", "err", err, "retry_in", d)
		if !a.sleep(ctx, d) {
			return
		}
	}
	a.publish(r, status, time.Time{})
	attrs := []any{"phase", status.Phase, "reason", status.Reason}
	if status.ExitCode != nil {
		attrs = append(attrs, "exit_code", *status.ExitCode, "signal", status.Signal)
	}
	log.Info("replica ended", attrs...)
}

// observation is what the replica's files and processes show.
type observation struct {
	status agentapi.ReplicaStatus // Phase empty while the supervisor starts
	pids   *supervisor.PIDs       // set while the supervisor runs
	// seen, for a running replica whose process was seen alive, is when
	// the look began: the process was alive then.
	seen time.Time
}

// observe derives r's state from its directory:
//
//	exit.json                          → exited
//	pid.json, supervisor alive         → running once the child is recorded
//	pid.json, supervisor gone          → exited if exit.json appeared meanwhile, else lost
//	no pid.json                        → starting, or lost once the supervisor
//	                                     exited or StartTimeout passed
func (a *Agent) observe(r *replica, log *slog.Logger) observation {
	// Whether the supervisor had exited is taken before the looks at its
	// files: one that exited before them has written all it ever will, but
	// one seen exited only after them may have recorded its pid, run the
	// command and written its exit in between (a busy machine deschedules
	// the agent between two reads), and calling that lost runs the job
	// twice.
	gone := r.launched.exited()
	exit, ok, exitErr := supervisor.ReadExit(r.dir)
	if ok {
		return observation{status: exitedStatus(r.id, exit)}
	}
	pids, ok, err := supervisor.ReadPIDs(r.dir)
	if err != nil {
		log.Warn("reading supervisor pids", "err", err)
	}
	if !ok {
		switch {
		case gone:
			return observation{status: a.lostStatus(r.id, nil, "supervisor exited without recording its pid")}
		case a.cfg.Clock.Now().Sub(r.since) > a.cfg.StartTimeout:
			if r.launched != nil {
				// It must not start the replica now that it counts as lost.
				log.Warn("killing a supervisor that did not record its pid", "pid", r.launched.proc.Pid)
				if err := r.launched.proc.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
					log.Error("killing supervisor", "pid", r.launched.proc.Pid, "err", err)
				}
				// It may have recorded its pid, and started the child,
				// since the look above: then end that child too, or the
				// work runs on beside its retry. SIGKILL is prompt; the
				// bound only guards against a wedged kernel.
				select {
				case <-r.launched.done:
				case <-time.After(5 * time.Second):
				}
				if exit, ok, _ := supervisor.ReadExit(r.dir); ok {
					return observation{status: exitedStatus(r.id, exit)}
				}
				if late, ok, _ := supervisor.ReadPIDs(r.dir); ok && late.Child != nil {
					return observation{status: a.lostStatus(r.id, late.Child, a.endOrphan(r, late.Child, log))}
				}
			}
			return observation{status: a.lostStatus(r.id, nil, fmt.Sprintf("supervisor did not record its pid within %v", a.cfg.StartTimeout))}
		}
		return observation{}
	}
	// Taken before the looks below: a process found alive by them was
	// alive at look (what the server bills up to, agentapi.ObservedAt).
	look := a.cfg.Clock.Now()
	if supervisor.Alive(pids.Supervisor.PID, pids.Supervisor.Start) {
		obs := observation{pids: &pids}
		if c := pids.Child; c != nil {
			obs.status = agentapi.ReplicaStatus{ID: r.id, Phase: agentapi.PhaseRunning, StartedAt: c.StartedAt}
			if supervisor.Alive(c.PID, c.Start) {
				// The child, not just its supervisor: a child that has
				// exited (a zombie until reaped) is not seen alive.
				obs.seen = look
			}
		}
		return obs
	}
	// The supervisor writes exit.json before it exits: look again, it may
	// have done so since the first look.
	if exit, ok, err := supervisor.ReadExit(r.dir); ok {
		return observation{status: exitedStatus(r.id, exit)}
	} else if err != nil {
		exitErr = err
	}
	reason := model.ReasonLost
	if exitErr != nil {
		reason = fmt.Sprintf("%s: %v", model.ReasonLost, exitErr)
	}
	a.endOrphan(r, pids.Child, log)
	return observation{status: a.lostStatus(r.id, pids.Child, reason)}
}

// endOrphan ends what is left of a replica whose supervisor is gone without
// an exit record: nobody would record its end, and the server runs the work
// elsewhere. The child leads its process group; a container outlives its
// podman client and is removed too. It returns the reason to report.
func (a *Agent) endOrphan(r *replica, child *supervisor.Process, log *slog.Logger) string {
	if c := child; c != nil && supervisor.Alive(c.PID, c.Start) {
		log.Warn("killing the processes of a replica whose supervisor is gone", "pgid", c.PID)
		if err := syscall.Kill(-c.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			log.Error("killing the processes of a lost replica", "pgid", c.PID, "err", err)
		}
	}
	if sb, ok, _ := supervisor.ReadSandbox(r.dir); ok {
		if rt, err := runtime.For(sb); err == nil {
			if err := rt.Cleanup(context.Background(), sb); err != nil {
				log.Error("removing the container of a lost replica", "err", err)
			}
		}
	}
	return fmt.Sprintf("supervisor did not record its pid within %v; its replica was ended", a.cfg.StartTimeout)
}

func exitedStatus(id string, exit supervisor.Exit) agentapi.ReplicaStatus {
	code, end := exit.Code, exit.EndedAt
	if exit.Reason == agentapi.ReasonFenced {
		// Not the job's doing: lost, so the attempt is retried; refused
		// before it started, at no cost to the job.
		s := agentapi.ReplicaStatus{ID: id, Phase: agentapi.PhaseLost, Reason: exit.Reason, StartedAt: exit.StartedAt, EndedAt: &end, NeverStarted: exit.NeverStarted}
		if exit.NeverStarted {
			s.StartedAt = time.Time{}
		}
		return s
	}
	return agentapi.ReplicaStatus{
		ID:        id,
		Phase:     agentapi.PhaseExited,
		ExitCode:  &code,
		Signal:    exit.Signal,
		Reason:    exit.Reason,
		StartedAt: exit.StartedAt,
		EndedAt:   &end,
	}
}

func (a *Agent) lostStatus(id string, child *supervisor.Process, reason string) agentapi.ReplicaStatus {
	now := a.cfg.Clock.Now()
	s := agentapi.ReplicaStatus{ID: id, Phase: agentapi.PhaseLost, Reason: reason, EndedAt: &now}
	if child != nil {
		s.StartedAt = child.StartedAt
	}
	return s
}

// signalStop sends SIGTERM to a live supervisor, which ends its replica
// with the replica's signal and grace period. It reports whether there is
// nothing left to do: signalled, or the supervisor is gone.
func signalStop(sup supervisor.Process, log *slog.Logger) bool {
	if !supervisor.Alive(sup.PID, sup.Start) {
		return true
	}
	if err := syscall.Kill(sup.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		log.Error("asking the supervisor to stop its replica", "pid", sup.PID, "err", err)
		return false
	}
	log.Info("stopping replica", "supervisor_pid", sup.PID)
	return true
}
