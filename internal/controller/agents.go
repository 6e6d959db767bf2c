package controller

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

var _ agentapi.ControlPlane = (*Controller)(nil)

// Register records a node and its GPUs, or refreshes a known one. A NodeID
// the server does not know creates the node with that id (a remote agent's
// id is the subject of its token, chosen by the admin who created it); it
// must be a valid name (model.ValidName). Registering a lost node makes it
// ready again.
func (c *Controller) Register(ctx context.Context, r agentapi.Registration) (agentapi.RegisterResponse, error) {
	if r.NodeID != "" && !model.ValidName(r.NodeID) {
		return agentapi.RegisterResponse{}, model.FieldErrors{{Path: "nodeId", Message: fmt.Sprintf("%q is not a valid node id: use 1 to 63 lower-case letters, digits and dashes", r.NodeID)}}
	}
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	id := r.NodeID
	var n *model.Node
	if old, ok := c.st.Node(id); ok && old.State == model.NodeTerminated && old.Labels[model.LabelInstance] != "" {
		// Its instance is gone: a late agent of a terminated node must
		// not bring it back.
		c.mu.Unlock()
		return agentapi.RegisterResponse{}, fmt.Errorf("node %s: its instance was terminated: %w", id, ErrNotFound)
	} else if ok && id != "" {
		n = old.Clone()
		n.Version++
	} else {
		if id == "" {
			id = c.cfg.NewID("n-")
		}
		n = &model.Node{ID: id, RegisteredAt: now, Version: 1}
	}
	launched := n.Labels[labelOffer] != "" && n.Labels[model.LabelInstance] != ""
	kept := n.Clone()
	n.Name, n.Provider, n.GPUs, n.GPUSource = r.Name, r.Provider, r.GPUs, r.GPUSource
	n.CPU, n.Memory, n.Labels = r.CPU, r.Memory, r.Labels
	n.Region, n.Zone, n.InstanceType, n.CapacityType = r.Region, r.Zone, r.InstanceType, r.CapacityType
	if launched {
		keepLaunched(n, kept)
	}
	n.Runtimes, n.NotIsolated, n.Driver = r.Runtimes, r.NotIsolated, r.Driver
	// A launched node keeps the pool and price the scale loop gave it; a
	// runner that states its pool (a Kubernetes pool's virtual node) states
	// its price too, 0 included, as its GPUs come and go.
	if r.Pool != "" {
		n.Pool, n.PricePerHour = r.Pool, r.PricePerHour
	}
	// An owned machine joins the pool that declares its id.
	c.placeOwnedLocked(n)
	// Its GPUs are shareable when its pool says so (spec.sharedGPUs).
	n.SharedGPUs = c.poolSharesGPUsLocked(n.Pool)
	b := &store.Batch{Nodes: []*model.Node{n}}
	if n.State == model.NodeLaunching {
		c.recordLocked(b, model.Event{Kind: model.EventNodeReady, Object: "node/" + n.ID, Node: n.ID, Provider: n.Labels[labelOffer], Region: n.Region,
			Message: fmt.Sprintf("instance %s is running and its agent registered", n.Labels[model.LabelInstance])})
	}
	n.State = model.NodeReady
	n.LastHeartbeat = now
	if n.LaunchedAt.IsZero() {
		n.StoppedAt = time.Time{} // a lost machine is back: metered again
	}
	c.st.PutNode(n)
	c.lastSeen[id] = now
	c.nodeGen.bump(id)
	c.broadcastLocked()
	cm := c.com.submit(b)
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return agentapi.RegisterResponse{}, fmt.Errorf("recording node: %w", err)
	}
	c.trigger()
	c.cfg.Log.Info("node registered", "node_id", id, "name", r.Name, "gpus", len(r.GPUs), "gpu_source", r.GPUSource)
	return agentapi.RegisterResponse{NodeID: id, HeartbeatInterval: model.Duration(c.cfg.HeartbeatInterval),
		HeartbeatTimeout: model.Duration(c.cfg.HeartbeatTimeout)}, nil
}

// keepLaunched keeps on n, a node the scale loop launched, what the launch
// decided rather than what its agent says of itself: its provider, offer,
// instance id and the labels the scale loop set. An agent on a cloud
// instance registers as an owned machine by default, and must not be able
// to claim another instance (its notices are trusted for that one).
func keepLaunched(n, launched *model.Node) {
	n.Provider, n.InstanceType, n.CapacityType = launched.Provider, launched.InstanceType, launched.CapacityType
	n.Region, n.Zone = cmpOr(launched.Region, n.Region), cmpOr(launched.Zone, n.Zone)
	labels := make(map[string]string, len(n.Labels)+5)
	for k, v := range n.Labels {
		labels[k] = v
	}
	for _, k := range []string{labelOffer, model.LabelInstance, labelForJobs, labelGPUs, labelGPUModel} {
		if v, ok := launched.Labels[k]; ok {
			labels[k] = v
		}
	}
	n.Labels = labels
}

// Sync records the agent's observations, then returns the node's desired
// replicas, waiting up to req.Wait for a change when the agent is current.
//
// The node counts as heard from the sync's arrival, but only if it is
// answered: a sync the server cannot answer within agentapi.SyncBound
// beyond its wait (three quarters of it, so the answer still reaches an
// agent that fences itself), or refuses, takes the node's last-seen time
// back. The agent moves its fence only on an answer, so the server's
// heartbeat clock never runs on a sync that the agent counted as failed.
func (c *Controller) Sync(ctx context.Context, req agentapi.SyncRequest) (resp agentapi.SyncResponse, err error) {
	// The bound is on the server's work (commits, the barrier), in real
	// time; the long poll between is on the controller's clock.
	began, bound := time.Now(), agentapi.SyncBound(c.cfg.HeartbeatTimeout)*3/4
	received := c.cfg.Clock.Now() // before waiting on the lock: the offset is the agent's, not ours
	work, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	c.mu.Lock()
	n, ok := c.st.Node(req.NodeID)
	if !ok {
		c.mu.Unlock()
		return agentapi.SyncResponse{}, fmt.Errorf("node %s: %w (%w)", req.NodeID, agentapi.ErrUnknownNode, ErrNotFound)
	}
	if n.State == model.NodeLost {
		// Its attempts were given up on; it takes work again once it has
		// registered anew, and not before.
		c.mu.Unlock()
		return agentapi.SyncResponse{}, fmt.Errorf("node %s was lost (silent past the heartbeat timeout) and must register again: %w (%w)", req.NodeID, agentapi.ErrUnknownNode, ErrNotFound)
	}
	// A late agent of a node already ended is answered, but nothing of it
	// is kept: forgetAgentLocked dropped it as the node ended, and nothing
	// would drop it again.
	ended := n.State == model.NodeTerminated
	arrived := c.cfg.Clock.Now()
	before, seenBefore := c.lastSeen[req.NodeID]
	if !ended {
		c.lastSeen[req.NodeID] = arrived
		c.heard[req.NodeID] = arrived // what it reports is known from now on (meterHoldsLocked)
		defer func() {
			if err == nil {
				return
			}
			c.mu.Lock()
			if last, ok := c.lastSeen[req.NodeID]; ok && last.Equal(arrived) {
				c.lossCheck.ok = false // a heard time went back
				if seenBefore {
					c.lastSeen[req.NodeID] = before
				} else {
					delete(c.lastSeen, req.NodeID)
				}
			}
			c.mu.Unlock()
		}()
	}
	c.observeDataLocked(req.NodeID, req)
	b := &store.Batch{}
	off, timed := time.Duration(0), req.SentAt != nil && !req.SentAt.IsZero()
	if timed && ended {
		// Its times are taken as they are, and its clock not kept.
		timed = false
	} else if timed {
		est := c.timed[req.NodeID].next(received.Sub(*req.SentAt), received)
		c.timed[req.NodeID], off = est, est.off
	} else {
		delete(c.timed, req.NodeID)
	}
	for _, st := range toServerTime(req, off, timed) {
		c.observeLocked(req.NodeID, st, b)
	}
	allocs := c.telemetryAllocsLocked(n, req.Telemetry)
	var cm *commit
	if !b.Empty() {
		c.broadcastLocked()
		cm = c.com.submit(b)
	}
	gen, changed := c.nodeGen.get(req.NodeID), c.nodeGen.changed(req.NodeID)
	c.mu.Unlock()
	c.reportNotices(n, req.Notices)
	if tcm := c.observeTelemetry(req.NodeID, req.Telemetry, allocs); tcm != nil {
		cm = tcm // acknowledged after cm: waiting for it waits for both
	}
	if cm != nil {
		if err := cm.wait(work); err != nil {
			return agentapi.SyncResponse{}, fmt.Errorf("recording replica status: %w", err)
		}
		c.trigger()
	}
	spent := time.Since(began)
	if req.Generation == gen && req.Wait > 0 && cm == nil {
		if err := c.waitForChange(ctx, req, changed); err != nil {
			return agentapi.SyncResponse{}, err
		}
	}
	c.mu.Lock()
	resp, b2, mk, err := c.desiredLocked(req.NodeID)
	if err != nil {
		c.mu.Unlock()
		return agentapi.SyncResponse{}, err
	}
	if !b2.Empty() {
		c.com.submit(b2)
	}
	seq := c.com.last()
	c.mu.Unlock()
	if err := c.makeCheckpointDirs(mk); err != nil {
		return agentapi.SyncResponse{}, err
	}
	// Nothing reaches an agent before it is durable: an agent must never
	// start a replica that a crash would make the server forget.
	bctx, bcancel := context.WithTimeout(ctx, bound-spent)
	defer bcancel()
	if err := c.com.barrier(bctx, seq); err != nil {
		return agentapi.SyncResponse{}, fmt.Errorf("waiting for the node's desired set to be durable: %w", err)
	}
	if c.cfg.Leading != nil && !c.cfg.Leading() {
		// A leader frozen or starved past its renew deadline: another may
		// lead already and must be the one the node hears from.
		return agentapi.SyncResponse{}, ErrNotLeading
	}
	return resp, nil
}

// ErrNotLeading refuses an agent's sync on a replica that is no longer
// sure it leads.
var ErrNotLeading = errors.New("this server replica is no longer sure it leads the control plane; sync with the leader")

// desiredLocked builds the node's desired set: every replica of a live
// attempt on it that has not finished. It mints job tokens that are missing
// (after a restart the secrets are gone) and returns them in a batch, and
// the checkpoint folders to create (makeCheckpointDirs) before the set is
// sent.
func (c *Controller) desiredLocked(nodeID string) (agentapi.SyncResponse, *store.Batch, []ckptDir, error) {
	resp := agentapi.SyncResponse{Generation: c.nodeGen.get(nodeID), Replicas: []agentapi.ReplicaSpec{},
		HeartbeatTimeout: model.Duration(c.cfg.HeartbeatTimeout)}
	b := &store.Batch{}
	if n, ok := c.st.Node(nodeID); ok && n.State == model.NodeDraining {
		resp.Drain = true
	}
	var failed error
	var mk []ckptDir
	c.st.LiveAttemptsOn(nodeID, func(a *model.Attempt) bool {
		job, _ := c.st.Job(a.JobID)
		for _, r := range a.Replicas {
			if r.NodeID != nodeID || r.State.Terminal() {
				continue
			}
			secret, err := c.id.MintJobToken(a.JobID, a.ID, c.jobTokenTTL(job), b)
			if err != nil {
				failed = err
				return false
			}
			spec, err := c.cachedReplicaSpec(job, a, r, secret, &mk)
			if errors.Is(err, errSecretUnavailable) {
				// A secret deleted (or its key retired) after submission:
				// hold this replica back rather than fail the node's sync.
				c.cfg.Log.Error("holding replica back", "job_id", job.ID, "err", err)
				continue
			}
			if err != nil {
				failed = err
				return false
			}
			resp.Replicas = append(resp.Replicas, spec)
		}
		return true
	})
	if failed != nil {
		return resp, nil, nil, failed
	}
	sort.Slice(resp.Replicas, func(i, j int) bool { return resp.Replicas[i].ID < resp.Replicas[j].ID })
	return resp, b, mk, nil
}

func (c *Controller) jobTokenTTL(job *model.Job) time.Duration {
	return job.Spec.Limits.Runtime.D() + c.cfg.JobTokenTTL
}

// masterPort gives each job a stable rendezvous port for torchrun.
func masterPort(jobID string) int {
	h := fnv.New32a()
	h.Write([]byte(jobID))
	return 29500 + int(h.Sum32()%1000)
}

// specKey is what a cached replica spec was built from: the state's
// objects are replaced, never changed, so equal pointers mean an equal
// spec.
type specKey struct {
	job     *model.Job
	attempt *model.Attempt
	master  *model.Node // the node of rank 0, whose address is MASTER_ADDR
	secret  string
}

// cachedSpec is a replica spec as last built, and from what.
type cachedSpec struct {
	key  specKey
	spec agentapi.ReplicaSpec
}

// cachedReplicaSpec returns replicaSpec's answer, reusing the one last built
// for the replica while its job, attempt, rank 0's node and job token are the
// same objects: a node's sync returns every replica it runs, thousands on a
// Kubernetes pool's virtual node, and most are unchanged since the last.
// Jobs that name secrets are built afresh each time, since their values may
// change in the vault. The spec's maps and slices are shared between
// answers: callers must not change them. Callers hold c.mu.
func (c *Controller) cachedReplicaSpec(job *model.Job, a *model.Attempt, r model.Replica, secret string, mk *[]ckptDir) (agentapi.ReplicaSpec, error) {
	if len(job.Spec.Run.Secrets) > 0 || len(job.Spec.Data) > 0 || c.checkpointStorageLocked(r) != nil {
		return c.replicaSpec(job, a, r, secret, mk)
	}
	master, _ := c.st.Node(a.Replicas[0].NodeID)
	key := specKey{job: job, attempt: a, master: master, secret: secret}
	id := model.ReplicaID(a.ID, r.Rank)
	if cs, ok := c.specs[id]; ok && cs.key == key {
		c.checkpointDirFor(a, mk)
		return cs.spec, nil
	}
	spec, err := c.replicaSpec(job, a, r, secret, mk)
	if err != nil {
		return spec, err
	}
	if c.specs == nil {
		c.specs = map[string]cachedSpec{}
	}
	c.specs[id] = cachedSpec{key: key, spec: spec}
	return spec, nil
}

// forgetSpecsLocked drops the cached specs of an attempt that ended.
func (c *Controller) forgetSpecsLocked(a *model.Attempt) {
	for _, r := range a.Replicas {
		delete(c.specs, model.ReplicaID(a.ID, r.Rank))
	}
	delete(c.ckptMade, a.ID)
}

func (c *Controller) replicaSpec(job *model.Job, a *model.Attempt, r model.Replica, secret string, mk *[]ckptDir) (agentapi.ReplicaSpec, error) {
	ck, err := c.checkpointSyncLocked(job, r)
	if err != nil {
		return agentapi.ReplicaSpec{}, fmt.Errorf("%w: %w", errSecretUnavailable, err)
	}
	// On a pool with checkpoint storage the folder is the node's own
	// (the agent's work root), synced with the storage; elsewhere it is
	// the server's.
	ckpt := ""
	if c.poolStorageLocked(r.NodeID) == nil {
		ckpt = c.checkpointDirFor(a, mk)
	}
	env := make(map[string]string, len(job.Spec.Run.Env)+len(job.Spec.Run.Secrets)+12)
	for k, v := range job.Spec.Run.Env {
		env[k] = v
	}
	// Secrets are opened only here, into the desired replica the node
	// fetches; the agent keeps its replica spec at mode 0600.
	sec, err := c.secretEnvLocked(job)
	if err != nil {
		return agentapi.ReplicaSpec{}, fmt.Errorf("%w: %w", errSecretUnavailable, err)
	}
	for k, v := range sec {
		env[k] = v
	}
	gpus := make([]string, len(r.GPUs))
	for i, g := range r.GPUs {
		gpus[i] = strconv.Itoa(g)
	}
	master := "127.0.0.1"
	if n, ok := c.st.Node(a.Replicas[0].NodeID); ok && n.Labels["gpufleet.dev/address"] != "" {
		master = n.Labels["gpufleet.dev/address"]
	}
	perReplica := len(r.GPUs)
	if perReplica == 0 {
		perReplica = 1
	}
	for k, v := range map[string]string{
		"GPUFLEET_SERVER":         c.cfg.ServerURL,
		"GPUFLEET_JOB_ID":         job.ID,
		"GPUFLEET_ATTEMPT":        strconv.Itoa(a.Number),
		"GPUFLEET_JOB_TOKEN":      secret,
		"GPUFLEET_CHECKPOINT_DIR": ckpt,
		"CUDA_VISIBLE_DEVICES":    strings.Join(gpus, ","),
		"MASTER_ADDR":             master,
		"MASTER_PORT":             strconv.Itoa(masterPort(job.ID)),
		"WORLD_SIZE":              strconv.Itoa(len(a.Replicas)),
		"RANK":                    strconv.Itoa(r.Rank),
		"NODE_RANK":               strconv.Itoa(r.Rank),
		"LOCAL_WORLD_SIZE":        strconv.Itoa(perReplica),
	} {
		env[k] = v
	}
	if job.ArrayID != "" {
		env["GPUFLEET_ARRAY_ID"] = job.ArrayID
		env["GPUFLEET_ARRAY_INDEX"] = strconv.Itoa(job.ArrayIndex)
	}
	spec := agentapi.ReplicaSpec{
		SecretEnv: secretEnvNames(sec),
		ID:        model.ReplicaID(a.ID, r.Rank),
		JobID:     job.ID,
		AttemptID: a.ID,
		Attempt:   a.Number,
		Rank:      r.Rank,
		Command:   job.Spec.Run.Command,
		Workdir:   job.Spec.Run.Workdir,
		Archive:   job.Spec.Run.Archive,
		Env:       env,
		GPUs:      r.GPUs,
		Runtime:   job.Spec.Limits.Runtime,
		Signal:    job.Spec.Checkpoint.Signal,
		Grace:     job.Spec.Checkpoint.Grace,
		Stop:      a.Stop,
		Image:     job.Spec.Run.Image,
		Project:   job.Project,
		Tags:      job.Tags,
		CPU:       job.Spec.Resources.CPU,
		Memory:    job.Spec.Resources.Memory,
	}
	spec.Checkpoint = ck
	spec.Data = c.dataSyncLocked(job)
	return spec, nil
}

// splitReplicaID undoes model.ReplicaID.
func splitReplicaID(id string) (attemptID string, rank int, ok bool) {
	i := strings.LastIndex(id, "-r")
	if i < 0 {
		return "", 0, false
	}
	rank, err := strconv.Atoi(id[i+2:])
	if err != nil || rank < 0 {
		return "", 0, false
	}
	return id[:i], rank, true
}

// offsetWindow is how long a node's least-transit clock sample stands
// before a newer one replaces it, so a clock that drifts or is stepped is
// followed within it.
const offsetWindow = 5 * time.Minute

// clockOffset estimates an agent clock's offset from the server's as the
// smallest arrival − SentAt seen over offsetWindow: every sample is the
// offset plus that sync's transit (queueing on a loaded server included),
// so the least one is the closest (NTP's clock filter keeps its
// least-delay sample for the same reason).
type clockOffset struct {
	off time.Duration
	at  time.Time // when off was sampled
}

// next is the estimate after a sample taken at now.
func (o clockOffset) next(sample time.Duration, now time.Time) clockOffset {
	if o.at.IsZero() || sample <= o.off || now.Sub(o.at) > offsetWindow {
		return clockOffset{off: sample, at: now}
	}
	return o
}

// toServerTime returns req's statuses with their times moved from the
// agent's clock to the server's by off, the node's clock offset
// (clockOffset). A sync without SentAt (timed false: an older agent) is
// taken as it is.
func toServerTime(req agentapi.SyncRequest, off time.Duration, timed bool) []agentapi.ReplicaStatus {
	if !timed {
		return req.Statuses
	}
	shift := func(t *time.Time) *time.Time {
		if t == nil || t.IsZero() {
			return t
		}
		s := t.Add(off)
		return &s
	}
	out := make([]agentapi.ReplicaStatus, len(req.Statuses))
	for i, st := range req.Statuses {
		st.StartedAt = *shift(&st.StartedAt)
		st.EndedAt, st.ObservedAt = shift(st.EndedAt), shift(st.ObservedAt)
		out[i] = st
	}
	return out
}

// observeLocked applies one replica status from nodeID.
func (c *Controller) observeLocked(nodeID string, st agentapi.ReplicaStatus, b *store.Batch) {
	attemptID, rank, ok := splitReplicaID(st.ID)
	if !ok {
		return
	}
	a, ok := c.st.Attempt(attemptID)
	if !ok || a.State.Terminal() || rank >= len(a.Replicas) || a.Replicas[rank].NodeID != nodeID {
		return // unknown or already recorded: leaving it out of the desired set acknowledges it
	}
	r := a.Replicas[rank]
	if r.State.Terminal() {
		return
	}
	c.observeCheckpointLocked(a.JobID, st.Checkpoint, b)
	now := c.cfg.Clock.Now()
	if st.Phase == agentapi.PhaseRunning && st.ObservedAt != nil {
		// Never past the report's arrival, whatever the agent's clock says;
		// never back.
		c.observed[st.ID] = maxTime(c.observed[st.ID], minTime(*st.ObservedAt, now))
	}
	a = a.Clone()
	r = a.Replicas[rank]
	switch st.Phase {
	case agentapi.PhaseRunning:
		if r.State == model.AttemptRunning {
			return
		}
		r.State, r.Endpoint = model.AttemptRunning, st.Endpoint
	case agentapi.PhaseExited:
		// No exit code: the agent stopped a replica it never started.
		r.ExitCode, r.Reason, r.State = st.ExitCode, st.Reason, model.AttemptFailed
		r.EndedAt = reportedEnd(a, st, now)
		if st.ExitCode != nil && *st.ExitCode == 0 && st.Reason != model.ReasonRuntimeLimit {
			r.State = model.AttemptSucceeded
		}
	case agentapi.PhaseLost:
		r.State, r.Reason, r.NeverStarted = model.AttemptLost, st.Reason, st.NeverStarted
		r.EndedAt = reportedEnd(a, st, now)
		if r.Reason == "" {
			r.Reason = model.ReasonLost
		}
	default:
		return
	}
	a.Replicas[rank] = r
	a.Version++
	if a.State == model.AttemptStarting && r.State == model.AttemptRunning {
		a.State = model.AttemptRunning
		started := reportedStart(a, st, now)
		a.StartedAt = &started
		if j, ok := c.st.Job(a.JobID); ok && !j.State.Terminal() {
			j = j.Clone()
			j.State = model.JobRunning
			if j.StartedAt == nil {
				j.StartedAt = &started
				c.cfg.Metrics.gpuReached(started.Sub(j.SubmittedAt))
			}
			j.Version++
			c.st.PutJob(j)
			b.Jobs = append(b.Jobs, j)
		}
	}
	if a.StartedAt == nil && st.Phase == agentapi.PhaseExited && r.ExitCode != nil && !st.StartedAt.IsZero() {
		// A replica that ended between two syncs was never seen running;
		// the agent's record still says when it started.
		started := reportedStart(a, st, now)
		a.StartedAt = &started
	}
	c.settleLocked(a, b, now)
}

// waitForChange waits in an agent's sync for a change of its node's desired
// set, up to req.Wait. While it waits the agent has nothing new to report
// (it cuts the call short when a replica changes), so the meter may bill
// the node's replicas up to now (meterHoldsLocked); a wait that ends
// without the agent cutting it confirms them up to its end. The caller
// does not hold c.mu.
func (c *Controller) waitForChange(ctx context.Context, req agentapi.SyncRequest, changed <-chan struct{}) error {
	c.mu.Lock()
	c.polling[req.NodeID]++
	c.mu.Unlock()
	var err error
	select {
	case <-changed: // the node's generation moved
	case <-c.cfg.Clock.After(req.Wait.D()):
	case <-ctx.Done():
		err = ctx.Err()
	}
	c.mu.Lock()
	if c.polling[req.NodeID]--; c.polling[req.NodeID] <= 0 {
		delete(c.polling, req.NodeID)
	}
	if _, known := c.heard[req.NodeID]; known && err == nil { // not if lost meanwhile (forgetAgentLocked)
		c.heard[req.NodeID] = c.cfg.Clock.Now()
	}
	c.mu.Unlock()
	return err
}

// reportedStart is when st says its replica started, bounded by what the
// server saw: not before the attempt was made, not after the report
// arrived (now). The meter charges an attempt from it, so a report that
// reaches the server late (a loaded server, a leader change) costs the
// job none of its seconds.
func reportedStart(a *model.Attempt, st agentapi.ReplicaStatus, now time.Time) time.Time {
	if st.StartedAt.IsZero() || st.StartedAt.After(now) {
		return now
	}
	return maxTime(st.StartedAt, a.CreatedAt)
}

// reportedEnd is when st says its replica ended, bounded by what the
// server saw: not before the attempt started, not after the report
// arrived (now). The meter charges an attempt up to it, so an end heard
// late (the agent was finding a new leader) is not billed as running.
func reportedEnd(a *model.Attempt, st agentapi.ReplicaStatus, now time.Time) *time.Time {
	end := now
	if st.EndedAt != nil && st.EndedAt.Before(now) {
		end = *st.EndedAt
	}
	if a.StartedAt != nil {
		end = maxTime(end, *a.StartedAt)
	}
	return &end
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// settleLocked decides what an attempt's replica states add up to: a gang
// with a failed or lost replica stops the others; an attempt whose replicas
// have all ended is finished and its job moves on.
func (c *Controller) settleLocked(a *model.Attempt, b *store.Batch, now time.Time) {
	allDone, anyBad := true, false
	for _, r := range a.Replicas {
		if !r.State.Terminal() {
			allDone = false
		} else if r.State != model.AttemptSucceeded {
			anyBad = true
		}
	}
	if !allDone {
		if anyBad && !a.Stop {
			a.Stop, a.StopState, a.StopWhy = true, model.AttemptFailed, "another replica of the gang ended"
			c.bumpNodesLocked(a)
		}
		c.st.PutAttempt(a)
		b.Attempts = append(b.Attempts, a)
		return
	}
	c.finishLocked(a, b, now)
}

// attemptEnd is when attempt a ended: when the last of its replicas ended
// as their agents reported it (reportedEnd), or now when the server ended
// one of them itself (a lost node, a cancel before the start).
func attemptEnd(a *model.Attempt, now time.Time) time.Time {
	var end time.Time
	for _, r := range a.Replicas {
		if r.EndedAt == nil {
			return now
		}
		end = maxTime(end, *r.EndedAt)
	}
	if end.IsZero() || end.After(now) {
		return now
	}
	return end
}

// finishLocked ends an attempt and moves its job on: done, or requeued by
// its retry policy.
func (c *Controller) finishLocked(a *model.Attempt, b *store.Batch, now time.Time) {
	a.State, a.Reason, a.ExitCode = outcome(a)
	end := attemptEnd(a, now)
	a.EndedAt = &end
	c.st.PutAttempt(a)
	b.Attempts = append(b.Attempts, a)
	c.id.EndAttempt(a.ID)
	c.forgetSpecsLocked(a)
	for rank := range a.Replicas {
		delete(c.observed, model.ReplicaID(a.ID, rank))
	}
	c.cost.ended = append(c.cost.ended, a) // metered up to EndedAt by the next cost pass

	j, ok := c.st.Job(a.JobID)
	if !ok || j.State.Terminal() {
		return
	}
	if a.StartedAt != nil && end.After(*a.StartedAt) {
		gpus := 0.0
		for _, r := range a.Replicas {
			if r.GPUShare > 0 {
				gpus += r.GPUShare
			} else {
				gpus += float64(len(r.GPUs))
			}
		}
		if gpus > 0 {
			c.st.AddUsage(j.Spec.Queue, gpus*end.Sub(*a.StartedAt).Hours(), now)
		}
	}
	j = j.Clone()
	j.Version++
	j.ExitCode, j.Reason = a.ExitCode, a.Reason
	requeue, refused := false, false
	ended := a.State
	if cancelRequested(a) {
		// A cancel is final: an attempt that ends lost or preempted after
		// its job was cancelled ends the job cancelled, never requeued.
		ended = model.AttemptCancelled
	}
	switch ended {
	case model.AttemptSucceeded:
		j.State = model.JobSucceeded
	case model.AttemptCancelled:
		j.State = model.JobCancelled
		if a.State != model.AttemptCancelled {
			j.Reason = fmt.Sprintf("%s; attempt %d then ended %s", model.ReasonCancelled, a.Number, a.State)
			if a.Reason != "" {
				j.Reason += ": " + a.Reason
			}
		}
	case model.AttemptStoppedEarly:
		j.State = model.JobStoppedEarly
	case model.AttemptPreempted, model.AttemptLost:
		if budgetStopped(a) {
			// Stopped by a budget: requeued and held until the budget
			// allows it again; not an interruption counted against retries.
			requeue = true
			break
		}
		if neverRan(a) && j.Refusals < j.MaxRefusals() {
			// Refused by a fence before anything ran: the job lost
			// nothing, and is not charged a retry for it, up to a cap.
			j.Refusals++
			requeue, refused = true, true
			break
		}
		j.Preemptions++
		requeue = j.Preemptions <= j.Spec.Retries.Preemptions
		if !requeue {
			j.State, j.Reason = model.JobFailed, fmt.Sprintf("%s; interrupted %d times, retries.preemptions is %d", a.Reason, j.Preemptions, j.Spec.Retries.Preemptions)
		}
	default:
		j.Failures++
		requeue = j.Failures <= j.Spec.Retries.Failures && a.Reason != model.ReasonRuntimeLimit
		if !requeue {
			j.State = model.JobFailed
		}
	}
	j.RetryAt = nil
	if requeue {
		j.State, j.EnqueuedAt = model.JobQueued, now
		j.Reason = fmt.Sprintf("requeued after attempt %d ended %s", a.Number, a.State)
		if ended == model.AttemptFailed {
			// A crash loop waits before its next attempt (the scheduler
			// holds it until RetryAt); an interruption does not.
			d := model.FailureBackoff(j.Failures)
			at := now.Add(d)
			j.RetryAt = &at
			j.Reason += fmt.Sprintf("; backing off %s after %d failures", d, j.Failures)
		}
		if refused {
			// A short wait before the next placement, not a tight loop.
			d := model.RefusalBackoff(j.Refusals)
			at := now.Add(d)
			j.RetryAt = &at
			j.Reason += fmt.Sprintf("; backing off %s after %d fence-refused attempts (at most %d)", d, j.Refusals, j.MaxRefusals())
		}
	} else {
		j.FinishedAt = &now
		c.id.RevokeJob(j.ID, b)
	}
	c.st.PutJob(j)
	b.Jobs = append(b.Jobs, j)
	c.attemptEventLocked(b, j, a, requeue)
	c.notifyAttemptLocked(b, j, a, now)
	c.cfg.Log.Info("attempt ended", "job_id", j.ID, "attempt", a.Number, "state", a.State, "reason", a.Reason, "job_state", j.State)
}

// neverRan reports whether no replica of a ran its command: at least one
// was refused by its supervisor because its node's fence had passed
// (Replica.NeverStarted), and the others were too or were stopped by their
// agents before they started (no exit code). Such an attempt costs its job
// no retry; it is never billed, as it never started (Attempt.StartedAt).
func neverRan(a *model.Attempt) bool {
	refused := false
	for _, r := range a.Replicas {
		switch {
		case r.NeverStarted:
			refused = true
		case r.State == model.AttemptFailed && r.ExitCode == nil && r.Reason == agentapi.ReasonStopped:
		default:
			return false
		}
	}
	return refused && a.StartedAt == nil
}

// outcome derives an attempt's end from its replicas. A requested stop
// decides the state (cancelled, preempted) whatever the exit codes; a lost
// replica makes the attempt lost; otherwise the first failure decides.
func outcome(a *model.Attempt) (model.AttemptState, string, *int) {
	var firstBad *model.Replica
	for i := range a.Replicas {
		r := &a.Replicas[i]
		if r.State == model.AttemptLost {
			return model.AttemptLost, r.Reason, nil
		}
		// A replica stopped because of another's failure is not the cause.
		if r.State != model.AttemptSucceeded && (firstBad == nil || firstBad.Reason == agentapi.ReasonStopped && r.Reason != agentapi.ReasonStopped) {
			firstBad = r
		}
	}
	if a.Stop && a.StopState != model.AttemptFailed {
		var code *int
		if firstBad != nil {
			code = firstBad.ExitCode
		}
		return a.StopState, a.StopWhy, code
	}
	if firstBad == nil {
		zero := 0
		return model.AttemptSucceeded, "", &zero
	}
	reason := firstBad.Reason
	if reason == "" && firstBad.ExitCode != nil {
		reason = fmt.Sprintf("exit code %d", *firstBad.ExitCode)
	}
	return model.AttemptFailed, reason, firstBad.ExitCode
}

// AppendLog stores a chunk of replica output.
func (c *Controller) AppendLog(ctx context.Context, ch agentapi.LogChunk) (agentapi.LogAck, error) {
	attemptID, rank, ok := splitReplicaID(ch.ReplicaID)
	if !ok {
		return agentapi.LogAck{}, fmt.Errorf("replica %q: %w", ch.ReplicaID, ErrNotFound)
	}
	c.mu.Lock()
	a, ok := c.st.Attempt(attemptID)
	c.mu.Unlock()
	if !ok || rank >= len(a.Replicas) || a.Replicas[rank].NodeID != ch.NodeID {
		// The server does not know this replica (its state was reset): take
		// the output and drop it, so the agent can finish and forget it
		// instead of retrying forever.
		c.cfg.Log.Warn("dropping log of unknown replica", "replica_id", ch.ReplicaID, "node_id", ch.NodeID)
		return agentapi.LogAck{Size: ch.Offset + int64(len(ch.Data)), Complete: true}, nil
	}
	key := logstore.Key{JobID: a.JobID, Attempt: a.Number, Rank: rank}
	if len(ch.Data) == 0 && !ch.EOF {
		// A question: where does the server's copy end?
		size, complete, err := c.cfg.Logs.Size(key)
		if err != nil {
			return agentapi.LogAck{}, fmt.Errorf("reading log of %s: %w", ch.ReplicaID, err)
		}
		return agentapi.LogAck{Size: size, Complete: complete}, nil
	}
	size, err := c.cfg.Logs.Append(key, ch.Offset, ch.Data, ch.EOF)
	if err != nil {
		return agentapi.LogAck{Size: size}, fmt.Errorf("storing log of %s: %w", ch.ReplicaID, err)
	}
	return agentapi.LogAck{Size: size, Complete: ch.EOF && size == ch.Offset+int64(len(ch.Data))}, nil
}

// forgetAgentLocked drops what the controller keeps of node id's agent in
// memory (when it last synced, its clock) as the node is lost or ended: a
// node that comes back registers and syncs anew, and one that does not
// leaves nothing behind.
func (c *Controller) forgetAgentLocked(id string) {
	c.lossCheck.ok = false
	delete(c.lastSeen, id)
	delete(c.heard, id)
	delete(c.timed, id)
}

// graceNodes gives every node a full heartbeat timeout, from now, to be
// heard: a server that has just started, or a replica that has just taken
// over the lead, heard no node before and must not count that as silence.
// Run calls it as its loops begin, so the time spent building the
// controller and switching the API over (long on a loaded machine) is not
// taken from the nodes. (An agent that fences itself measures its own
// bound from its last answered sync, which precedes this; docs/postgres.md.)
func (c *Controller) graceNodes() {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.st.ActiveNodes() {
		if last, ok := c.lastSeen[n.ID]; !ok || last.Before(now) {
			c.lastSeen[n.ID] = now
		}
	}
}

// checkNodes marks nodes silent past the heartbeat timeout lost, and their
// live attempts with them. A walk remembers when the first node still heard
// would fall silent (lossCheck); until then, while no node's state changed
// and no heard time went back (heard times otherwise only move on), no node
// can be lost and the next checks skip the walk.
func (c *Controller) checkNodes(ctx context.Context) {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	if lc := &c.lossCheck; lc.ok && lc.gen == c.st.NodeStateGen() && !now.After(lc.at) {
		c.mu.Unlock()
		return
	}
	b := &store.Batch{}
	var first time.Time
	for _, n := range c.st.ActiveNodes() {
		if n.State != model.NodeReady && n.State != model.NodeDraining {
			continue
		}
		if now.Sub(c.lastSeen[n.ID]) <= c.cfg.HeartbeatTimeout {
			if at := c.lastSeen[n.ID].Add(c.cfg.HeartbeatTimeout); first.IsZero() || at.Before(first) {
				first = at
			}
			continue
		}
		c.cfg.Log.Warn("node lost: no heartbeat", "node_id", n.ID, "timeout", c.cfg.HeartbeatTimeout)
		c.loseNodeLocked(n, b, now, fmt.Sprintf("no heartbeat for %s", c.cfg.HeartbeatTimeout))
	}
	// No node heard: none can be lost before a node's state changes.
	c.lossCheck = lossCheck{ok: true, gen: c.st.NodeStateGen(), at: first}
	if first.IsZero() {
		c.lossCheck.at = now.Add(c.cfg.HeartbeatTimeout)
	}
	if b.Empty() {
		c.mu.Unlock()
		return
	}
	c.broadcastLocked()
	cm := c.com.submit(b)
	c.mu.Unlock()
	if err := cm.wait(ctx); err == nil {
		c.trigger()
	}
}

// checkArchive refuses a submission whose spec.run.archive was not uploaded
// within the job's project (POST /v1/archives?project=P): an archive's
// code and data are its project's, and a neighbour that learned a digest
// (from a log, a shared script, a guess at a public file) must not run it
// or unpack it on a node. The answer is the same whether the archive was
// uploaded in another project or never, so it tells nothing of others.
func (c *Controller) checkArchive(s *Submission) (model.FieldErrors, error) {
	d := s.Spec.Run.Archive
	if d == "" {
		return nil, nil
	}
	var fe model.FieldErrors
	if c.cfg.Archives == nil {
		fe.Add("spec.run.archive", "this server stores no uploaded workdirs: give the job a workdir on the node instead")
		return fe, nil
	}
	ok, err := c.cfg.Archives.Granted(s.Project, d)
	if err != nil {
		return nil, fmt.Errorf("checking archive %s: %w", d, err)
	}
	if !ok {
		fe.Add("spec.run.archive", fmt.Sprintf("archive %s was not uploaded within project %s: upload it within that project (gpufleet run --upload-workdir --project %s, or POST /v1/archives?project=%s) and submit again", d, s.Project, s.Project, s.Project))
	}
	return fe, nil
}

// FetchArchiveFor opens an uploaded working directory for the agent of node
// nodeID (the route a remote agent's token reaches): only the archive of a
// job with a replica desired on that node. Any other digest is ErrNotFound
// whether or not it was uploaded, so a node's token can neither read
// another job's code nor learn that it exists.
func (c *Controller) FetchArchiveFor(ctx context.Context, nodeID, digest string) (io.ReadCloser, error) {
	c.mu.Lock()
	wanted := false
	c.st.LiveAttemptsOn(nodeID, func(a *model.Attempt) bool {
		j, ok := c.st.Job(a.JobID)
		if !ok || j.Spec.Run.Archive != digest {
			return true
		}
		for _, r := range a.Replicas {
			wanted = wanted || r.NodeID == nodeID && !r.State.Terminal()
		}
		return !wanted
	})
	c.mu.Unlock()
	if !wanted {
		return nil, fmt.Errorf("archive %s: no job on node %s uses it: %w", digest, nodeID, ErrNotFound)
	}
	return c.FetchArchive(ctx, digest)
}

// FetchArchive opens an uploaded working directory for an agent. It does
// not check who asks: the in-process agent calls it; a remote agent's
// request goes through FetchArchiveFor.
func (c *Controller) FetchArchive(_ context.Context, digest string) (io.ReadCloser, error) {
	if c.cfg.Archives == nil {
		return nil, fmt.Errorf("archive %s: this server stores no archives: %w", digest, ErrNotFound)
	}
	rc, err := c.cfg.Archives.Open(digest)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("archive %s was never uploaded: %w", digest, ErrNotFound)
	}
	return rc, err
}

// lossCheck is what checkNodes' last walk learnt: with the nodes' states
// at gen (state.NodeStateGen), no node is silent past the heartbeat
// timeout before at. ok is cleared when a heard time goes back.
type lossCheck struct {
	ok  bool
	gen uint64
	at  time.Time
}
