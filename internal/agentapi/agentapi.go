// Package agentapi is the agent protocol (DESIGN.md §4): the messages a node
// agent and the control plane exchange, and the ControlPlane interface an
// agent calls. The in-process agent of the local node calls the controller
// directly through this interface; a remote agent calls the same methods over
// HTTP under /v1/agent/. Agents pull: they report what they observe and
// receive the desired set of replicas, so a lost message is repaired by the
// next sync.
package agentapi

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Version is the protocol version; a server refuses agents of another major.
const Version = "v1"

// ErrUnknownNode is returned by Sync when the server does not know the node,
// or has marked it lost (it was silent past its heartbeat timeout): the
// agent must Register again before it syncs. Its replicas keep running; the
// server's desired set after registration says which of them still count.
var ErrUnknownNode = errors.New("node is not registered")

// ControlPlane is what an agent needs from the server. Implementations are
// safe for concurrent use.
type ControlPlane interface {
	// Register announces the node and its GPUs. A NodeID the server already
	// knows re-registers that node (after an agent or server restart); an
	// empty NodeID asks for a new one. Idempotent.
	Register(ctx context.Context, r Registration) (RegisterResponse, error)
	// Sync reports the agent's observed replicas and returns the desired set.
	// When req.Generation equals the server's current generation for the
	// node, Sync waits up to req.Wait for a change before answering (long
	// poll). Every Sync is also a heartbeat. An error matching
	// ErrUnknownNode means the agent must Register again.
	Sync(ctx context.Context, req SyncRequest) (SyncResponse, error)
	// AppendLog stores a chunk of a replica's output at its offset. Chunks
	// are idempotent: bytes the server already has are ignored, and a chunk
	// that starts past the server's end is not stored. Either way the ack's
	// Size says where the agent must continue.
	AppendLog(ctx context.Context, c LogChunk) (LogAck, error)
	// FetchArchive streams the uploaded archive with content address
	// digest ("sha256:<hex>"); the caller closes it and must verify the
	// digest of what it read. Idempotent.
	FetchArchive(ctx context.Context, digest string) (io.ReadCloser, error)
}

// Registration is the node's facts as its agent sees them.
type Registration struct {
	NodeID       string             `json:"nodeId,omitempty"`
	Name         string             `json:"name"`
	Provider     string             `json:"provider"`
	GPUs         []model.GPU        `json:"gpus"`
	GPUSource    string             `json:"gpuSource"`
	CPU          float64            `json:"cpu"`
	Memory       model.Bytes        `json:"memory"`
	Labels       map[string]string  `json:"labels,omitempty"`
	Region       string             `json:"region,omitempty"`
	Zone         string             `json:"zone,omitempty"`
	InstanceType string             `json:"instanceType,omitempty"`
	CapacityType model.CapacityType `json:"capacityType,omitempty"`
	AgentVersion string             `json:"agentVersion"`
	// Pool, when set, names the NodePool the node belongs to (a
	// Kubernetes pool's virtual nodes); an agent leaves it empty.
	Pool string `json:"pool,omitempty"`
	// PricePerHour is what the node costs in USD per hour (a Kubernetes
	// pool's virtual node: its GPUs × price per GPU-hour), for the cost
	// meter; it counts only with Pool set.
	PricePerHour float64 `json:"pricePerHour,omitempty"`
	// Runtimes lists how the node can run replicas: "process", and
	// "container" where it has a container runtime (needed by jobs with
	// run.image).
	Runtimes []string `json:"runtimes,omitempty"`
	// NotIsolated is set when the node runs replicas as its agent's own
	// user, so that a job could read the node's control-plane files and
	// other jobs' (an agent that is not root, or one run with the insecure
	// opt-in): the server places only admins' jobs there. Agents of
	// Kubernetes pods, and of root agents with workload users, leave it
	// unset.
	NotIsolated bool `json:"notIsolated,omitempty"`
	// Driver is the NVIDIA driver version, for the CUDA check of jobs'
	// images (model.RunSpec.CUDA); empty without a real driver.
	Driver string `json:"driver,omitempty"`
}

// JoinRequest is a launched instance's first contact: it presents its
// one-time join token as the bearer and says which instance it is.
type JoinRequest struct {
	// InstanceID is the cloud's id of the machine (instance metadata);
	// the server accepts it only if it is the instance the launch
	// returned for the join token's node.
	InstanceID string `json:"instanceId"`
}

// JoinResponse is the node's agent token, given once, and its node id.
type JoinResponse struct {
	NodeID string `json:"nodeId"`
	Token  string `json:"token"`
}

// ErrJoinRefused: a join token that is unknown, expired, already used, or
// presented by another instance than its node's.
var ErrJoinRefused = errors.New("join refused")

// RegisterResponse names the node and how often it must sync.
type RegisterResponse struct {
	NodeID            string         `json:"nodeId"`
	HeartbeatInterval model.Duration `json:"heartbeatInterval"`
	// HeartbeatTimeout is how long the server lets the node go unheard
	// before it declares it lost and requeues its replicas elsewhere;
	// zero from a server that does not say.
	HeartbeatTimeout model.Duration `json:"heartbeatTimeout,omitempty"`
}

// ReplicaSpec is one replica the server wants running (or stopped) on the node.
type ReplicaSpec struct {
	// ID is unique per attempt and rank (model.ReplicaID); an agent never
	// starts the same ID twice.
	ID        string   `json:"id"`
	JobID     string   `json:"jobId"`
	AttemptID string   `json:"attemptId"`
	Attempt   int      `json:"attempt"`
	Rank      int      `json:"rank"`
	Command   []string `json:"command"`
	Workdir   string   `json:"workdir,omitempty"`
	// Archive, when set, is the content address of the job's uploaded
	// working directory: the agent fetches it (FetchArchive), unpacks it
	// into the replica's work folder and checks its digest before it
	// starts the replica.
	Archive string            `json:"archive,omitempty"`
	Env     map[string]string `json:"env"`
	// SecretEnv names the keys of Env whose values are secret (the job's
	// run.secrets and GPUFLEET_JOB_TOKEN), sorted. A runner that writes
	// the replica into an object others can read (a Kubernetes Job) keeps
	// these values apart from it.
	SecretEnv []string `json:"secretEnv,omitempty"`
	GPUs      []int    `json:"gpus"`
	// Runtime limits the run; 0 means none. When it passes, the replica
	// gets Signal, then SIGKILL after Grace, and exits with ReasonRuntimeLimit.
	Runtime model.Duration `json:"runtime,omitempty"`
	Signal  string         `json:"signal"`
	Grace   model.Duration `json:"grace"`
	// Stop asks for Signal, Grace, then SIGKILL.
	Stop bool `json:"stop,omitempty"`
	// What a container runtime needs beyond the command: the job's image
	// (run.image; empty: the node's default), its project and tags, and
	// the CPU and memory each replica asked for (0: unset). A process
	// agent ignores them.
	Image   string            `json:"image,omitempty"`
	Project string            `json:"project,omitempty"`
	Tags    map[string]string `json:"tags,omitempty"`
	CPU     float64           `json:"cpu,omitempty"`
	Memory  model.Bytes       `json:"memory,omitempty"`
	// Checkpoint, when set, has the agent sync the job's checkpoint
	// folder with object storage (docs/storage.md): restore the latest
	// complete checkpoint before the replica starts, upload each new one
	// the job marks with LATEST and once more when it ends. Only rank 0
	// carries it. It holds credentials and the data key: the agent keeps
	// it in memory for the attempt's life and never writes it to disk.
	Checkpoint *CheckpointSync `json:"checkpoint,omitempty"`
	// Data are the job's datasets (spec.data), which the agent fetches
	// into its data cache before the replica starts and shows it read-only
	// (docs/datasets.md). They hold credentials: kept in memory only, like
	// Checkpoint.
	Data []DataSync `json:"data,omitempty"`
}

// DataSync is one dataset of a replica, resolved by the server.
type DataSync struct {
	// Field is the dataset's place in the job ("spec.data[0]"), for
	// errors.
	Field string `json:"field"`
	// Source is the job's spec.data[i].source, as written.
	Source string `json:"source"`
	// Path is where the job reads it, relative to its working directory.
	Path string `json:"path"`
	// Digest is model.DataDigest of the job's project and source: what the
	// node reports holding once it is cached.
	Digest string `json:"digest"`
	// Storage is where the objects are: its Prefix is the dataset's (no
	// secrets in it).
	Storage model.Storage `json:"storage"`
	// AccessKeyID and SecretAccessKey are opened by the server from the
	// storage's credentialsRef; empty: the node's own credentials.
	AccessKeyID     string `json:"accessKeyId,omitempty"`
	SecretAccessKey string `json:"secretAccessKey,omitempty"`
	// Error, when set, is why the server cannot resolve the source (a
	// storage the project no longer declares, credentials that do not
	// open): the agent ends the replica with it, unstarted.
	Error string `json:"error,omitempty"`
}

// DataProgress is a replica's dataset download in progress.
type DataProgress struct {
	ReplicaID string `json:"replicaId"`
	// Done and Total are bytes, over all the replica's datasets.
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
}

// CheckpointSync is where and how a replica's checkpoints are kept.
type CheckpointSync struct {
	// Storage is the pool's storage (no secrets in it).
	Storage model.Storage `json:"storage"`
	// AccessKeyID and SecretAccessKey are opened by the server from the
	// storage's credentialsRef; empty: the node's own credentials.
	AccessKeyID     string `json:"accessKeyId,omitempty"`
	SecretAccessKey string `json:"secretAccessKey,omitempty"`
	// DataKey is the job's project's 32-byte data key, which seals every
	// object client-side.
	DataKey []byte `json:"dataKey"`
	// Interval is how often the agent looks for a new LATEST marker
	// (0: 5s).
	Interval model.Duration `json:"interval,omitempty"`
}

// Phase is what an agent observes of a replica.
type Phase string

// Replica phases.
const (
	PhaseRunning Phase = "running"
	PhaseExited  Phase = "exited"
	// PhaseLost: the replica's process is gone and left no exit record.
	PhaseLost Phase = "lost"
)

// ReplicaStatus is what the agent observed of one replica.
type ReplicaStatus struct {
	ID    string `json:"id"`
	Phase Phase  `json:"phase"`
	// ExitCode is set when Phase is exited; a replica killed by a signal
	// exits 128+signal, as shells report it.
	ExitCode *int   `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// Reason is set when the agent or supervisor ended the replica:
	// model.ReasonRuntimeLimit, "stopped", or why it was lost.
	Reason    string     `json:"reason,omitempty"`
	StartedAt time.Time  `json:"startedAt"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	// ObservedAt, for a running replica, is when the agent last saw its
	// process alive (taken before the look, so the process was alive
	// then): not when the sync was sent, which may be long after under
	// load. The server bills a running replica up to it and no further,
	// so the time between the replica's end and the agent noticing it
	// is never billed; the end report's EndedAt closes the attempt.
	// Absent from older agents: the server then bills up to the sync's
	// arrival, or to now while the agent waits in a long poll
	// (docs/cost.md). Not a change to report: an agent does not cut its
	// long poll short for it.
	ObservedAt *time.Time `json:"observedAt,omitempty"`
	// NeverStarted, on a lost replica, says its command never ran: its
	// supervisor refused to start it because the node's fence had passed
	// (ReasonFenced). Through no fault of the job, at no cost to it: the
	// server requeues the job after a short back-off without counting the
	// attempt against its retries (up to model.Job.MaxRefusals), and bills
	// nothing for it. Older agents leave it unset (the
	// attempt then counts as an interruption).
	NeverStarted bool `json:"neverStarted,omitempty"`
	// Checkpoint is the time of the last checkpoint the agent uploaded
	// for the replica (ReplicaSpec.Checkpoint), the time its LATEST
	// marker names: work lost by preempting the job is measured from it.
	Checkpoint *time.Time `json:"checkpoint,omitempty"`
	// Endpoint, for a service's replica on a runner that puts something
	// in front of it (a Kubernetes Service), is the host:port where the
	// server reaches the replica's port; empty: the node's address and
	// the port.
	Endpoint string `json:"endpoint,omitempty"`
}

// Reasons a supervisor records.
const (
	ReasonStopped = "stopped"
	// ReasonFenced: the node had not heard from the control plane for
	// most of its heartbeat timeout, so the replica was ended (or never
	// started) before the server could give the node up and run the
	// work elsewhere. The agent reports such a replica lost.
	ReasonFenced = "fenced: no answer from the control plane for most of its heartbeat timeout"
)

// SyncBound bounds one sync beyond its long-poll wait, under heartbeat
// timeout h, on both sides: an agent that fences itself gives up a call
// unanswered by then (a server that holds the connection without
// answering, a frozen leader), and the server gives up answering a sync
// it could not answer within three quarters of it, rather than answer one
// the agent no longer waits for.
func SyncBound(h time.Duration) time.Duration {
	return min(max(h/4, 5*time.Second), 30*time.Second)
}

// SyncRequest reports observations and asks for the desired set.
type SyncRequest struct {
	NodeID     string          `json:"nodeId"`
	Generation uint64          `json:"generation"`
	Statuses   []ReplicaStatus `json:"statuses"`
	Wait       model.Duration  `json:"wait,omitempty"`
	// Telemetry, when set, carries the GPU samples taken since the last
	// answered sync. Optional: servers ignore what they do not track.
	Telemetry *Telemetry `json:"telemetry,omitempty"`
	// Starting is how many replicas of the desired set the agent is still
	// launching (a large set starts over many syncs): not yet reported,
	// neither running nor lost. Informational; every sync is a heartbeat.
	Starting int `json:"starting,omitempty"`
	// Notices are the cloud's outstanding warnings about this machine
	// (spot interruption, rebalance recommendation), as the agent reads
	// them on the machine (instance metadata). Level-triggered: repeated
	// on every sync while they stand. Optional: servers ignore what they do
	// not track.
	Notices []Notice `json:"notices,omitempty"`
	// Datasets are the digests (model.DataDigest) of the datasets the
	// node's data cache holds, sorted; the scheduler prefers nodes that
	// hold a job's data. Fetching lists the downloads of replicas not yet
	// started. Optional: servers ignore what they do not track.
	Datasets []string       `json:"datasets,omitempty"`
	Fetching []DataProgress `json:"fetching,omitempty"`
	// SentAt is the agent's clock when it sent the sync. The server takes
	// the difference from the sync's arrival as the agent's clock offset
	// (skew plus transit) and converts the statuses' StartedAt, EndedAt
	// and ObservedAt into its own time with it, so that a node whose clock
	// is wrong is billed its true runtime. Absent from older agents: their
	// times are taken as they are.
	SentAt *time.Time `json:"sentAt,omitempty"`
}

// Notice kinds.
const (
	// NoticeInterruption: the cloud stops the machine at Deadline.
	NoticeInterruption = "interruption"
	// NoticeRebalance: the cloud recommends moving work off the machine,
	// which is at elevated risk of interruption; no deadline yet.
	NoticeRebalance = "rebalance"
)

// Notice is a warning from the machine's cloud that it will take the
// machine back.
type Notice struct {
	// Kind is NoticeInterruption or NoticeRebalance.
	Kind string `json:"kind"`
	// Source names what reported it, e.g. "aws-imds".
	Source string `json:"source"`
	// InstanceID is the cloud's id of the machine.
	InstanceID string `json:"instanceId,omitempty"`
	// IssuedAt is when the cloud issued the notice (or when the agent first
	// saw it, where the cloud does not say).
	IssuedAt time.Time `json:"issuedAt"`
	// Deadline is when the machine stops; zero for a rebalance.
	Deadline time.Time `json:"deadline,omitzero"`
	// Action is what the cloud will do at Deadline: terminate, stop or
	// hibernate.
	Action string `json:"action,omitempty"`
}

// SyncResponse is the complete desired set for the node. A replica the agent
// runs that is absent here must be stopped; a finished replica absent here has
// been recorded and can be forgotten.
type SyncResponse struct {
	Generation uint64        `json:"generation"`
	Replicas   []ReplicaSpec `json:"replicas"`
	// Drain tells the agent the node is being drained.
	Drain bool `json:"drain,omitempty"`
	// HeartbeatTimeout is how long the server lets the node go unheard
	// before it gives the node up and requeues its replicas (as in
	// RegisterResponse); an agent that fences itself ends its replicas
	// before that.
	HeartbeatTimeout model.Duration `json:"heartbeatTimeout,omitempty"`
}

// LogChunk is part of one replica's combined stdout and stderr.
type LogChunk struct {
	NodeID    string `json:"nodeId"`
	ReplicaID string `json:"replicaId"`
	Offset    int64  `json:"offset"`
	Data      []byte `json:"data"`
	// EOF marks the end of the log: the replica exited and everything was sent.
	// A chunk with no data and no EOF only asks what the server holds.
	EOF bool `json:"eof,omitempty"`
}

// LogAck tells the agent how much of the log the server holds.
type LogAck struct {
	Size int64 `json:"size"`
	// Complete says the server needs no more of it: it holds the whole
	// log (an EOF came), or it drops this replica's output.
	Complete bool `json:"complete,omitempty"`
}

// Telemetry is GPU telemetry an agent ships with a sync: the samples taken
// since the last sync the server answered, oldest first. An agent whose
// machine has no GPU sends Source "none" and no samples.
type Telemetry struct {
	// Source names what read the GPUs: "nvml", "nvidia-smi",
	// "dcgm-exporter", "simulated" (demo GPUs) or "none".
	Source  string            `json:"source"`
	Samples []TelemetrySample `json:"samples,omitempty"`
}

// MaxTelemetrySamples bounds the samples of one sync; an agent that could
// not sync for longer drops its oldest samples.
const MaxTelemetrySamples = 64

// TelemetrySample is model.TelemetrySample, declared there so a node view
// (model.NodeInfo) can carry it.
type TelemetrySample = model.TelemetrySample

// GPUTelemetry is model.GPUTelemetry, declared there so a node view
// (model.NodeInfo) can carry it.
type GPUTelemetry = model.GPUTelemetry

// SyncUnlessChanged calls cp.Sync, cancelling the call if changed receives
// before the server answers (an agent with news to report should not sit
// out a long poll); woken reports that it did. A request that does not
// wait (req.Wait 0: it carries news) is never cancelled: the server
// answers it at once, and cutting it short on a node whose replicas change
// faster than a loaded server answers would starve the node's heartbeats
// until it is declared lost and its replicas run again elsewhere.
func SyncUnlessChanged(ctx context.Context, cp ControlPlane, req SyncRequest, changed <-chan struct{}) (resp SyncResponse, woken bool, err error) {
	if req.Wait <= 0 {
		resp, err = cp.Sync(ctx, req)
		return resp, false, err
	}
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	answered := make(chan struct{})
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		select {
		case <-changed:
			woken = true
			cancel()
		case <-answered:
		}
	}()
	resp, err = cp.Sync(callCtx, req)
	close(answered)
	<-listening
	return resp, woken, err
}
