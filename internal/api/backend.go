package api

import (
	"context"
	"io"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/cost/earlystop"
	"github.com/gpufleet/gpufleet/internal/efficiency"
	"github.com/gpufleet/gpufleet/internal/fleet"
	"github.com/gpufleet/gpufleet/internal/gpuseries"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// The API's view of the control plane, one small interface per concern.
// The server (internal/server) passes *controller.Controller as the
// Backend, and the controller's components, which keep their own locks,
// as Identity, Roles, Auditor and Secrets; the API never imports the
// controller. Every method is safe for concurrent
// use. Lookups of a missing object fail with model.ErrNotFound, requests
// that contradict an object's state with model.ErrConflict, and a budget's
// refusal with model.ErrBudget; handlers map them to 404, 409 and 403.

// Jobs submits, reads and acts on jobs.
type Jobs interface {
	// Submit creates a job, or returns the one an earlier submission
	// with the same idempotency key created (created false).
	Submit(ctx context.Context, s model.Submission) (job *model.Job, created bool, err error)
	Job(id string) (*model.Job, error)
	// Jobs returns matching jobs, newest first.
	Jobs(f model.JobFilter) []*model.Job
	// Array returns the tasks of an array job.
	Array(id string) ([]*model.Job, error)
	Attempts(jobID string) ([]*model.Attempt, error)
	Cancel(ctx context.Context, id string) (*model.Job, error)
	Checkpoint(ctx context.Context, id string) (*model.Job, error)
	// JobProject is the project of a job, false if there is no such job.
	JobProject(id string) (string, bool)
}

// Explainer says why a job waits, from the last scheduling pass.
type Explainer interface {
	Verdict(jobID string) (model.Verdict, bool)
	Explain(id string) (model.Explanation, error)
}

// Queues reads and changes queues.
type Queues interface {
	Queues() []model.QueueStatus
	Queue(name string) (model.QueueStatus, error)
	PutQueue(ctx context.Context, name string, spec model.QueueSpec) (q *model.Queue, created bool, err error)
	DeleteQueue(ctx context.Context, name string) error
}

// Identity authenticates bearer secrets and manages tokens.
type Identity interface {
	// Authenticate returns the valid token whose secret this is.
	Authenticate(secret string) (*model.Token, error)
	// AuthenticateHash is Authenticate by the secret's SHA-256 (a
	// separate proxy asks with the hash of the token it was shown).
	AuthenticateHash(hash []byte) (*model.Token, error)
	// CreateToken mints a token; the secret is returned only here.
	CreateToken(ctx context.Context, r model.TokenRequest) (*model.Token, string, error)
	Tokens() []*model.Token
	RevokeToken(ctx context.Context, id string) error
	RotateToken(ctx context.Context, id string) (*model.Token, string, error)
}

// Joiner exchanges a launched instance's one-time join token for its
// node's agent token. Refusals wrap agentapi.ErrJoinRefused; a node whose
// launch has not returned yet, model.ErrConflict.
type Joiner interface {
	Join(ctx context.Context, joinSecret, instanceID string) (agentapi.JoinResponse, error)
}

// Roles answers what a token may do and manages project grants.
type Roles interface {
	// Roles returns the projects a user token holds a role in and the
	// role, and whether it is a global admin (then roles is nil: every
	// project).
	Roles(t *model.Token) (roles map[string]model.Role, global bool)
	RoleIn(t *model.Token, project string) model.Role
	Grant(ctx context.Context, g model.Grant) (model.Grant, error)
	Grants() []model.Grant
	RevokeGrant(ctx context.Context, user, project string) error
}

// Auditor appends to the audit chain.
type Auditor interface {
	// Audit chains and commits e, returning it as recorded.
	Audit(ctx context.Context, e model.AuditEntry) (model.AuditEntry, error)
}

// Secrets manages sealed secrets; values never come back out.
type Secrets interface {
	PutSecret(ctx context.Context, project, name string, value []byte) (model.SecretInfo, error)
	DeleteSecret(ctx context.Context, project, name string) error
	Secrets(project string) []model.SecretInfo
	// ResealSecrets seals every secret not sealed with the newest key
	// again with it and returns how many it resealed.
	ResealSecrets(ctx context.Context) (int, error)
}

// FleetRevisions applies and reads the declared fleet's revisions.
type FleetRevisions interface {
	ApplyFleet(ctx context.Context, desired *manifest.Set, opts model.ApplyOptions) (model.ApplyResult, error)
	Rollback(ctx context.Context, to int, opts model.ApplyOptions) (model.ApplyResult, error)
	Revisions() []model.Revision
	Revision(n int) (*model.Revision, error)
	// PlanBase is the revision and documents a plan of desired is
	// compared against.
	PlanBase(desired *manifest.Set) (*model.Revision, *manifest.Set)
}

// FleetState reads the fleet as declared and as it is.
type FleetState interface {
	Declared() (*model.Revision, *manifest.Set)
	Drift(ctx context.Context) ([]fleet.Finding, error)
	Projects() []*model.Project
}

// Nodes lists and acts on nodes and the offers they come from.
type Nodes interface {
	// Nodes lists every node with every holder named; handlers show
	// each caller model.NodeInfo.Redacted views.
	Nodes() []model.NodeInfo
	InterruptNode(ctx context.Context, id string) (provider.Notice, error)
	CatalogOffers(ctx context.Context) []model.Offer
	// Unavailable lists the offers and pool regions providers cannot
	// sell now (insufficient capacity, quota), until a time.
	Unavailable() []model.Unavailable
}

// Costs reads the ledger's reports and budgets.
type Costs interface {
	CostReport(q cost.Query) (cost.Report, error)
	JobCost(id string) (cost.JobCost, bool)
	Budgets(days int) []model.BudgetStatus
	Budget(name string, days int) (model.BudgetStatus, error)
	// HourlyGPUUsage returns, per GPU model, GPUs in use per hour over
	// the days before now (oldest first) and the spot part of it.
	HourlyGPUUsage(days int) (usage, spot map[string][]float64)
}

// Telemetry reads what the fleet reported: efficiency, alerts, events,
// and a job's training metrics.
type Telemetry interface {
	Efficiency(jobID string) (efficiency.Report, bool)
	// GPUPlots returns a job's per-GPU series by attempt number.
	GPUPlots(jobID string) (map[int][]gpuseries.GPU, error)
	Alerts() []model.Alert
	// Events returns the matching events in Seq order.
	Events(f model.EventFilter) []model.Event
	ReportMetrics(ctx context.Context, jobID string, step int64, values map[string]float64) (earlystop.Verdict, error)
}

// Agents is the control plane as node agents speak to it.
type Agents interface {
	Register(ctx context.Context, r agentapi.Registration) (agentapi.RegisterResponse, error)
	// Sync records the agent's observations, then returns the node's
	// desired replicas, waiting up to req.Wait for a change when the
	// agent is current.
	Sync(ctx context.Context, req agentapi.SyncRequest) (agentapi.SyncResponse, error)
	AppendLog(ctx context.Context, ch agentapi.LogChunk) (agentapi.LogAck, error)
	// FetchArchiveFor opens an uploaded archive for a node with a
	// replica of a job that uses it; any other digest is
	// model.ErrNotFound, uploaded or not.
	FetchArchiveFor(ctx context.Context, nodeID, digest string) (io.ReadCloser, error)
}

// Backend is every concern the API serves from the scheduling state;
// Config.Controller holds one. Identity, Roles, Auditor and Secrets are
// Config fields of their own.
type Backend interface {
	Jobs
	Explainer
	Queues
	FleetRevisions
	FleetState
	Nodes
	Costs
	Telemetry
	Agents
}
