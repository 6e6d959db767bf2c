package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/atomicfile"
	"github.com/gpufleet/gpufleet/internal/agent/gate"
	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/archive"
	"github.com/gpufleet/gpufleet/internal/model"
)

// syncLoop reports statuses and applies the desired set until ctx ends.
// Each round:
//  1. collect the statuses of all tracked replicas;
//  2. sync: a long poll, unless there is news for the server, and cut short
//     when a replica's status changes meanwhile;
//  3. on success apply the desired set: start, stop, acknowledge; when the
//     server does not know the node, register again; on other failures
//     wait a backoff and go again, leaving every replica running.
func (a *Agent) syncLoop(ctx context.Context) {
	retry := a.newBackoff()
	for ctx.Err() == nil {
		// Changes before this point are in the request below.
		select {
		case <-a.changed:
		default:
		}
		req, endedIDs := a.request()
		sent, sentBoot := time.Now(), supervisor.BootTime() // the fence's clocks (fence.go)
		resp, woken, err := a.sync(ctx, req)
		switch {
		case err == nil:
			retry.reset()
			if resp.HeartbeatTimeout > 0 {
				a.lostAfter = resp.HeartbeatTimeout.D()
			}
			// Before anything of the answer is acted on: a replica it
			// starts runs under a fence measured from this sync.
			a.renewFence(sent, sentBoot)
			a.delivered = make(map[string]agentapi.ReplicaStatus, len(req.Statuses))
			for _, s := range req.Statuses {
				a.delivered[s.ID] = s
			}
			a.telemetryDelivered(req.Telemetry)
			a.noticesDelivered = req.Notices
			a.datasetsDelivered = req.Datasets
			a.apply(ctx, resp, endedIDs)
			a.releaseLaunches() // after apply: see releaseLaunches
		case ctx.Err() != nil:
			return
		case woken:
			// A replica changed during the long poll: report it now.
		case errors.Is(err, agentapi.ErrUnknownNode):
			// The server forgot the node or gave it up for lost: announce
			// it again under the same id. Replicas keep running; the
			// desired set that follows says which still count, and
			// everything is reported afresh.
			a.log.Warn("the server does not know this node; registering again", "err", err)
			if err := a.register(ctx); err != nil {
				return // only when ctx ended
			}
			a.generation, a.delivered = 0, nil
		default:
			d := retry.next()
			if a.fencing() {
				// A server back before the fence must be found before it:
				// retry at least every H/12 rather than backing off to 30 s.
				d = min(d, fenceRetry(a.lostAfter))
			}
			a.log.Warn("syncing with the server; replicas keep running", "err", err, "retry_in", d)
			a.sleep(ctx, d)
		}
	}
}

// request builds the next sync: every tracked replica with something to
// report, and the ids of those reported as ended. It waits on the server
// only when the server already has all of it.
func (a *Agent) request() (agentapi.SyncRequest, map[string]bool) {
	a.mu.Lock()
	statuses := make([]agentapi.ReplicaStatus, 0, len(a.tracked))
	for _, r := range a.tracked {
		if r.status.Phase != "" {
			s := r.status
			if s.Phase == agentapi.PhaseRunning && !r.seen.IsZero() {
				seen := r.seen
				s.ObservedAt = &seen
			}
			statuses = append(statuses, s)
		}
	}
	starting := len(a.starting)
	notices := slices.Clone(a.notices)
	fetching := a.fetchingRequestLocked()
	a.mu.Unlock()
	datasets := a.datasets()
	slices.SortFunc(statuses, func(x, y agentapi.ReplicaStatus) int { return strings.Compare(x.ID, y.ID) })

	wait := a.cfg.SyncWait
	if a.heartbeat > 0 {
		wait = min(wait, a.heartbeat)
	}
	if a.fencing() {
		wait = min(wait, fenceWait(a.lostAfter))
	}
	if !slices.Equal(notices, a.noticesDelivered) || !slices.Equal(datasets, a.datasetsDelivered) {
		wait = 0
	}
	if len(fetching) > 0 {
		wait = min(wait, fetchReportEvery) // progress reaches the server while it downloads
	}
	endedIDs := map[string]bool{}
	for _, s := range statuses {
		if ended(s.Phase) {
			endedIDs[s.ID] = true
		}
		if last, ok := a.delivered[s.ID]; !ok || news(last, s) {
			wait = 0
		}
	}
	return agentapi.SyncRequest{
		NodeID:     a.nodeID,
		Generation: a.generation,
		Statuses:   statuses,
		Wait:       model.Duration(wait),
		Telemetry:  a.telemetryRequest(),
		Starting:   starting,
		Notices:    notices,
		Datasets:   datasets,
		Fetching:   fetching,
	}, endedIDs
}

// sync calls the server, cancelling the call if a replica's status changes
// before it answers; woken reports that. While the agent fences itself the
// call is bounded (agentapi.SyncBound) beyond its wait, so that a server
// that holds the connection without answering is left for the next in
// time, well before the fence stops anything.
func (a *Agent) sync(ctx context.Context, req agentapi.SyncRequest) (agentapi.SyncResponse, bool, error) {
	if a.fencing() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Wait.D()+agentapi.SyncBound(a.lostAfter))
		defer cancel()
	}
	sent := a.cfg.Clock.Now() // the clock its statuses' times are read on
	req.SentAt = &sent
	return agentapi.SyncUnlessChanged(ctx, a.cfg.ControlPlane, req, a.changed)
}

// apply acts on the desired set: it takes on replicas it does not track,
// stops those marked Stop or no longer listed, and forgets ended ones the
// server no longer lists in answer to a report of their end.
func (a *Agent) apply(ctx context.Context, resp agentapi.SyncResponse, reportedEnded map[string]bool) {
	a.generation = resp.Generation
	if resp.Drain != a.draining {
		a.draining = resp.Drain
		a.log.Info("node drain changed", "draining", resp.Drain)
	}
	desired := make(map[string]bool, len(resp.Replicas))
	busy := map[int]bool{}
	for _, spec := range resp.Replicas {
		if !spec.Stop {
			for _, g := range spec.GPUs {
				busy[g] = true
			}
		}
	}
	a.mu.Lock()
	a.busy = busy
	a.mu.Unlock()
	notStarted := 0
	for _, spec := range resp.Replicas {
		desired[spec.ID] = true
		a.mu.Lock()
		r, p := a.tracked[spec.ID], a.starting[spec.ID]
		if p != nil && spec.Stop {
			p.stop = true
		}
		a.mu.Unlock()
		switch {
		case r != nil:
			if spec.Stop {
				a.requestStop(r)
			}
			if spec.Checkpoint != nil && r.dir != "" && a.checkpointsOf(r) == nil {
				a.adoptCheckpoints(ctx, r, spec)
			}
		case p != nil:
			// Being launched; it is stopped once tracked if asked to be.
		case ctx.Err() != nil:
			// Shutting down: start nothing more. The replicas keep their
			// place in the desired set; the next agent run starts them.
			notStarted++
		default:
			a.startLaunch(ctx, spec)
		}
	}
	if notStarted > 0 {
		a.log.Info("shutting down: not starting replicas of the desired set", "replicas", notStarted)
	}

	var stop, forget []*replica
	a.mu.Lock()
	for id, p := range a.starting {
		if !desired[id] {
			p.stop = true
		}
	}
	for id, r := range a.tracked {
		switch {
		case desired[id]:
		case reportedEnded[id]:
			forget = append(forget, r)
			delete(a.tracked, id)
		case !ended(r.status.Phase):
			stop = append(stop, r)
		}
	}
	a.mu.Unlock()
	for _, r := range stop {
		a.requestStop(r)
	}
	for _, r := range forget {
		a.log.Info("replica end recorded by the server; forgetting it", "replica_id", r.id)
		if r.dir == "" {
			continue
		}
		// Off the sync loop: releasing a sandbox scans the processes of
		// its user and may remove a container, and a burst of ends must
		// not hold up the heartbeat.
		a.tending.Go(func() { a.forgetReplica(ctx, r) })
	}
}

// forgetReplica releases the sandbox of a replica whose end the server has,
// then marks it acknowledged; at most maxReleases run at once. Release
// comes before the marker, so a crash in between releases it again at the
// next start; so does a stop before it ran.
func (a *Agent) forgetReplica(ctx context.Context, r *replica) {
	select {
	case a.releasing <- struct{}{}:
		defer func() { <-a.releasing }()
	case <-ctx.Done():
		return
	}
	a.release(ctx, r)
	if err := atomicfile.Write(filepath.Join(r.dir, ackedFile), nil, 0o600); err != nil {
		// It will be reported again after a restart; the server
		// ignores what it already has.
		a.log.Warn("marking replica acknowledged", "replica_id", r.id, "err", err)
	}
}

// Launching the desired set.
const (
	// maxLaunches bounds the replicas launched at once: preparing one
	// (unpacking its archive, taking on its user, pulling its image) can
	// take a while, and a burst of hundreds must neither run all at once
	// nor one after another.
	maxLaunches = 8
	// maxReleases is how many finished replicas' sandboxes are released at
	// once, off the sync loop.
	maxReleases = 4
	// shutdownLaunchWait bounds how long a stopping agent waits for the
	// launches in flight to undo what they prepared.
	shutdownLaunchWait = 5 * time.Second
)

// pendingLaunch is a replica of the desired set being launched.
type pendingLaunch struct {
	stop bool // guarded by Agent.mu: the server wants it stopped or dropped it
}

// startLaunch admits spec in a goroutine of its own, at most maxLaunches at
// a time, so that the sync loop goes on (and the node keeps its heartbeat)
// while a large desired set starts. Until admitted the replica is in
// a.starting; a stop asked for meanwhile is applied once it is tracked, or
// keeps it from starting. Once ctx has ended nothing more starts.
func (a *Agent) startLaunch(ctx context.Context, spec agentapi.ReplicaSpec) {
	p := &pendingLaunch{}
	a.mu.Lock()
	a.starting[spec.ID] = p
	a.mu.Unlock()
	a.launching.Go(func() {
		var r *replica
		select {
		case a.slots <- struct{}{}:
			stopped := func() bool {
				a.mu.Lock()
				defer a.mu.Unlock()
				return p.stop
			}
			// Behind a slot a launch may wait long under a burst: the
			// fence is looked at now, as it is handed over.
			if a.awaitFence(ctx, stopped, a.log.With("replica_id", spec.ID, "job_id", spec.JobID)) && ctx.Err() == nil {
				r = a.admit(ctx, spec, stopped)
			}
			<-a.slots
		case <-ctx.Done():
		}
		a.mu.Lock()
		delete(a.starting, spec.ID)
		stop := p.stop
		a.mu.Unlock()
		if r != nil && (stop || spec.Stop) {
			a.requestStop(r)
		}
	})
}

// admit takes on a replica the server wants and the agent does not track.
// A replica whose directory exists was started before, by this agent or an
// earlier run: it is adopted, never started again. One the server wants
// stopped (spec.Stop, or stopped() by the time it is prepared) is not
// started at all, and reported as stopped. Once ctx has ended it starts
// nothing: it undoes what it prepared and returns nil.
func (a *Agent) admit(ctx context.Context, spec agentapi.ReplicaSpec, stopped func() bool) *replica {
	log := a.log.With("replica_id", spec.ID, "job_id", spec.JobID, "attempt_id", spec.AttemptID)
	if err := validID(spec.ID); err != nil {
		log.Error("refusing replica", "err", err)
		return a.trackEnded(ctx, spec.ID, "", agentapi.PhaseLost, fmt.Sprintf("agent refused the replica: %v", err))
	}
	dir := filepath.Join(a.replicas, spec.ID)
	if spec.Stop || stopped() {
		if _, err := os.Stat(dir); err != nil {
			log.Info("not starting a replica the server wants stopped")
			return a.trackEnded(ctx, spec.ID, "", agentapi.PhaseExited, agentapi.ReasonStopped)
		}
	}
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrExist) {
		log.Info("replica started before; adopting it, not starting it again")
		if err := os.Remove(filepath.Join(dir, ackedFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Warn("un-marking replica acknowledged", "err", err)
		}
		return a.adopt(ctx, spec.ID, dir)
	}
	if err == nil {
		err = atomicfile.SyncDir(a.replicas)
	}
	if err != nil {
		log.Error("creating replica directory", "err", err)
		return a.trackEnded(ctx, spec.ID, "", agentapi.PhaseLost, fmt.Sprintf("agent could not create the replica directory: %v", err))
	}
	sb, err := a.prepareSandbox(ctx, spec)
	if err != nil && ctx.Err() != nil {
		// Cut short by the agent stopping: not the replica's failure.
		// (prepareSandbox holds no user when it fails.)
		log.Info("shutting down: not starting the replica", "err", err)
		if sb.Home != "" {
			if err := os.RemoveAll(sb.Home); err != nil {
				log.Warn("removing replica folder", "err", err)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("removing replica directory", "err", err)
		}
		return nil
	}
	if err != nil {
		log.Error("preparing the replica's sandbox", "err", err)
		// A fetch that may work next time is lost (the attempt is
		// retried); an archive that can never unpack, or an image this
		// node cannot run, fails the attempt (no exit code).
		phase := agentapi.PhaseLost
		var ue *unpackError
		if errors.As(err, &ue) && (errors.Is(err, archive.ErrUnsafe) || errors.Is(err, archive.ErrTooLarge) || errors.Is(err, archive.ErrDigestMismatch)) ||
			errors.Is(err, errNoContainerRuntime) {
			phase = agentapi.PhaseExited
		}
		reason := err.Error()
		if ue == nil {
			reason = "agent could not prepare the replica: " + reason
		}
		return a.trackEnded(ctx, spec.ID, dir, phase, reason)
	}
	if ctx.Err() != nil || stopped() {
		// Prepared, but the agent is stopping or the server no longer
		// wants it: undo, so that nothing is adopted that never ran.
		if err := os.RemoveAll(sb.Home); err != nil {
			log.Warn("removing replica folder", "err", err)
		}
		a.putUser(spec.AttemptID, sb)
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("removing replica directory", "err", err)
		}
		if ctx.Err() != nil {
			log.Info("shutting down: not starting the replica")
			return nil
		}
		log.Info("not starting a replica the server wants stopped")
		return a.trackEnded(ctx, spec.ID, "", agentapi.PhaseExited, agentapi.ReasonStopped)
	}
	if len(spec.Data) > 0 {
		if err := a.fetchData(ctx, spec, &sb, stopped, log); err != nil {
			log.Error("fetching the job's data", "err", err)
			a.putUser(spec.AttemptID, sb)
			if rerr := os.RemoveAll(sb.Home); rerr != nil {
				log.Warn("removing replica folder", "err", rerr)
			}
			// Storage that may answer next time, or no room here: lost,
			// retried; a dataset that cannot be fetched as it is: failed.
			phase := agentapi.PhaseLost
			if permanentDataError(err) {
				phase = agentapi.PhaseExited
			}
			if ctx.Err() != nil || stopped() {
				// Cut short by the agent stopping or by a stop: nothing ran.
				if rerr := os.RemoveAll(dir); rerr != nil {
					log.Warn("removing replica directory", "err", rerr)
				}
				if ctx.Err() != nil {
					return nil
				}
				return a.trackEnded(ctx, spec.ID, "", agentapi.PhaseExited, agentapi.ReasonStopped)
			}
			return a.trackEnded(ctx, spec.ID, dir, phase, "agent could not fetch the job's data: "+err.Error())
		}
	}
	var ck *ckptState
	if spec.Checkpoint != nil {
		if ck, err = a.restoreCheckpoint(ctx, spec, sb, log); err != nil {
			log.Error("restoring the job's checkpoint", "err", err)
			a.putUser(spec.AttemptID, sb)
			// Storage that may answer next time: lost, retried; wrong
			// credentials, no bucket or a corrupt checkpoint: failed.
			phase := agentapi.PhaseLost
			if permanentCheckpointError(err) {
				phase = agentapi.PhaseExited
			}
			return a.trackEnded(ctx, spec.ID, dir, phase, "agent could not restore the job's checkpoint: "+err.Error())
		}
	}
	var g *gate.Gate
	if sb.Gate != nil {
		// Before the replica starts: a port taken here is the attempt's
		// loss (retried), not a replica nobody can reach.
		if g, err = a.openGate(spec.ID, dir, sb, spec.Env[model.ServiceKeySecret]); err != nil {
			log.Error("opening the replica's gate", "err", err)
			a.putUser(spec.AttemptID, sb)
			return a.trackEnded(ctx, spec.ID, dir, agentapi.PhaseLost, "agent could not serve the replica's port: "+err.Error())
		}
	}
	sb.EnvOverrides = a.envOverrides(spec, sb)
	l, err := a.launch(dir, spec, sb)
	if err != nil {
		log.Error("launching supervisor", "err", err)
		if g != nil {
			g.Close()
		}
		a.putUser(spec.AttemptID, sb)
		return a.trackEnded(ctx, spec.ID, dir, agentapi.PhaseLost, fmt.Sprintf("agent could not launch the supervisor: %v", err))
	}
	log.Info("started replica", "gpus", spec.GPUs, "runtime", sb.Runtime, "uid", uidOf(sb))
	r := a.newReplica(spec.ID, spec.AttemptID, dir, l)
	r.ckpt = ck
	r.gate = g
	// As track, but not once Run has stopped waiting for launches (the
	// check and the Add under one lock, before Run's Wait): a replica
	// started as the agent stopped runs on, and the next run adopts it.
	a.mu.Lock()
	if a.shut {
		a.mu.Unlock()
		if g != nil {
			g.Close() // the next agent run opens it again
		}
		log.Warn("replica started while the agent stopped; the next agent run adopts it")
		return nil
	}
	a.tracked[r.id] = r
	a.tending.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.tending.Done()
		a.tend(ctx, r)
	}()
	return r
}

// adopt tracks a replica started before (by this agent or an earlier run),
// taking on its workload user again.
func (a *Agent) adopt(ctx context.Context, id, dir string) *replica {
	attempt, key := "", ""
	if spec, err := supervisor.ReadSpec(dir); err == nil {
		attempt, key = spec.AttemptID, spec.Env[model.ServiceKeySecret]
	}
	r := a.newReplica(id, attempt, dir, nil)
	if sb, ok, err := supervisor.ReadSandbox(dir); err != nil {
		a.log.Warn("reading an adopted replica's sandbox", "replica_id", id, "err", err)
	} else if ok {
		if err := a.holdSandbox(attempt, sb); err != nil {
			a.log.Error("taking on an adopted replica's user", "replica_id", id, "err", err)
		}
		a.adoptData(id, sb)
		if sb.Gate != nil {
			// Its port was the agent's before the restart; until the gate
			// is back the replica is unreachable, never open.
			if g, err := a.openGate(id, dir, sb, key); err != nil {
				a.log.Error("opening an adopted replica's gate", "replica_id", id, "err", err)
			} else {
				r.gate = g
			}
		}
	}
	a.track(ctx, r)
	return r
}

// uidOf is the uid sb runs as, or -1 for the agent's own.
func uidOf(sb runtime.Sandbox) int {
	if sb.User == nil {
		return -1
	}
	return sb.User.UID
}

// ServerCAFile is the server's certificate in a replica's folder, for
// jobs reaching an https server (GPUFLEET_CA names it).
const ServerCAFile = "server-ca.pem"

// unpack fetches the job's uploaded workdir and unpacks it into work,
// the replica's work tree (where a relative Workdir runs), checking that
// what arrived has the content address it was asked for.
func (a *Agent) unpack(ctx context.Context, work, digest string) error {
	rc, err := a.cfg.ControlPlane.FetchArchive(ctx, digest)
	if err != nil {
		return err
	}
	defer rc.Close()
	got, err := archive.Unpack(rc, work, archive.Limits{})
	if err != nil {
		return err
	}
	if archive.DigestPrefix+got != digest {
		return fmt.Errorf("received %s%s: %w", archive.DigestPrefix, got, archive.ErrDigestMismatch)
	}
	return nil
}

// validID checks that a replica id is a safe directory name.
func validID(id string) error {
	if id == "" || len(id) > maxReplicaID {
		return fmt.Errorf("replica id %q: want 1 to %d characters", id, maxReplicaID)
	}
	if id[0] == '.' {
		return fmt.Errorf("replica id %q: must not start with a dot", id)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("replica id %q: only letters, digits, '-', '_' and '.' are allowed", id)
		}
	}
	return nil
}

// ended reports whether a phase is final.
func ended(p agentapi.Phase) bool { return p == agentapi.PhaseExited || p == agentapi.PhaseLost }

// news reports whether status s tells the server more than last, which it
// received: a later ObservedAt alone does not (it moves with every look,
// and the long poll is not cut short for it).
func news(last, s agentapi.ReplicaStatus) bool {
	last.ObservedAt, s.ObservedAt = nil, nil
	return !reflect.DeepEqual(last, s)
}
