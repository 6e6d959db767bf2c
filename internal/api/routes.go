package api

import (
	"net/http"

	"github.com/gpufleet/gpufleet/internal/advisor"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/gitops"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Permission names what a route lets its caller do.
type Permission string

// Permissions. User tokens hold them by role (admin tokens hold all); agent
// and job tokens hold only those their routes declare for their kind.
const (
	PermJobsSubmit Permission = "jobs.submit"
	PermJobsRead   Permission = "jobs.read"
	PermJobsCancel Permission = "jobs.cancel"
	// PermJobsCheckpoint lets a job report its own checkpoints.
	PermJobsCheckpoint Permission = "jobs.checkpoint"
	PermNodesRead      Permission = "nodes.read"
	PermOffersRead     Permission = "offers.read"
	PermTokensManage   Permission = "tokens.manage"
	PermMetricsRead    Permission = "metrics.read"
	PermAPIRead        Permission = "api.read"
	PermQueuesRead     Permission = "queues.read"
	// PermQueuesManage is for admins only, like tokens.manage.
	PermQueuesManage Permission = "queues.manage"
	// PermFleetRead lets a user plan, list revisions and report drift.
	PermFleetRead Permission = "fleet.read"
	// PermFleetManage (apply, rollback) is for admins only.
	PermFleetManage Permission = "fleet.manage"
	// PermAgent is the agent protocol (DESIGN.md §4): only agent tokens hold
	// it, each for its own node.
	PermAgent Permission = "agent.sync"
	// PermAgentJoin exchanges a launched instance's one-time join token
	// for its node's agent token: only join tokens hold it, and nothing
	// else.
	PermAgentJoin Permission = "agent.join"
	// PermProjectsRead lists the projects a user holds a role in.
	PermProjectsRead Permission = "projects.read"
	// PermUsersManage grants and revokes roles (admins only).
	PermUsersManage Permission = "users.manage"
	// PermAuditRead reads the audit log (admins only).
	PermAuditRead Permission = "audit.read"
	// PermTokensRotate replaces the caller's own token.
	PermTokensRotate Permission = "tokens.rotate"
	// PermServicesProxy is a separate service proxy's: read the endpoint
	// list, report load, ask whether a caller may use a service. Only
	// proxy tokens hold it, and they hold nothing else.
	PermServicesProxy Permission = "services.proxy"
)

// scope limits a non-user token to its own object.
type scope int

const (
	scopeNone scope = iota
	// scopeOwnJob: a job token may call the route only for its own job
	// (the {id} path value).
	scopeOwnJob
	// scopeOwnNode: an agent token may speak only for its own node, the
	// token's subject. The node id is in the body, so the handler checks it
	// (sameNode); the declaration documents it and a test holds handlers to it.
	scopeOwnNode
)

// Route is one declared endpoint.
type Route struct {
	Method  string
	Pattern string
	// Perm is what the caller must hold; Kinds are the token kinds that
	// may hold it at all.
	Perm  Permission
	Kinds []model.TokenKind
	Scope scope
	// Project says where the project a user's role is checked in comes
	// from (see access.go and MinRole).
	Project projectFrom
	// Public routes need no token (health only).
	Public bool
	// MaxBody overrides Config.MaxBodyBytes for this route (uploads).
	MaxBody int64

	Summary string
	// Query documents query parameters for the OpenAPI document.
	Query []Param
	// Request and Response are example values whose types document the
	// bodies; nil means none (or, for Response, not JSON).
	Request  any
	Response any
	// ResponseType overrides the response media type (logs, metrics).
	ResponseType string
	Status       int
	handler      func(s *Server) http.HandlerFunc
}

// Param is a documented query parameter.
type Param struct {
	Name, Type, Description string
}

var (
	users      = []model.TokenKind{model.TokenUser}
	usersJobs  = []model.TokenKind{model.TokenUser, model.TokenJob}
	allHolders = []model.TokenKind{model.TokenUser, model.TokenAgent, model.TokenJob}
	agents     = []model.TokenKind{model.TokenAgent}
	joiners    = []model.TokenKind{model.TokenJoin}
	proxies    = []model.TokenKind{model.TokenProxy}
)

// Routes is the table every endpoint is served from.
func Routes() []Route {
	return append([]Route{
		{Method: "GET", Pattern: "/healthz", Public: true, Summary: "Liveness: the process serves HTTP.", ResponseType: "text/plain", Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.healthz }},
		{Method: "GET", Pattern: "/readyz", Public: true, Summary: "Readiness: state is loaded and the store accepts writes.", ResponseType: "text/plain", Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.readyz }},
		{Method: "GET", Pattern: "/metrics", Perm: PermMetricsRead, Kinds: users, Summary: "Prometheus metrics.", ResponseType: "text/plain", Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.metrics }},
		{Method: "GET", Pattern: "/v1/openapi.json", Perm: PermAPIRead, Kinds: allHolders, Summary: "This API's OpenAPI 3 document.", ResponseType: "application/json", Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.openAPI }},
		{Method: "GET", Pattern: "/v1/version", Perm: PermAPIRead, Kinds: allHolders, Summary: "Server version.", Response: VersionInfo{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.version }},
		{Method: "POST", Pattern: "/v1/jobs", Project: projectOfBody, Perm: PermJobsSubmit, Kinds: users, Summary: "Submit a job (a Job manifest as JSON or YAML). Send Idempotency-Key to make retries safe.",
			Request: JobManifest{}, Response: JobView{}, Status: 201,
			handler: func(s *Server) http.HandlerFunc { return s.submitJob }},
		{Method: "GET", Pattern: "/v1/jobs", Project: projectOfQuery, Perm: PermJobsRead, Kinds: users, Summary: "List jobs, newest first.",
			Query: []Param{{"state", "string", "comma-separated job states"}, {"project", "string", "project name"}, {"array", "string", "only the tasks of this array job"}, {"user", "string", "only jobs this user submitted"}, {"queue", "string", "only jobs of this queue"}, {"limit", "integer", "most jobs to return (default 1000)"},
				{"offset", "integer", "skip this many matches (paging; the answer's total counts them all)"}, {"q", "string", "only jobs whose id, name, user, project or queue contains this (any case)"},
				{"summary", "boolean", "add each job's metered cost and efficiency (summaries)"}},
			Response: JobList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listJobs }},
		{Method: "GET", Pattern: "/v1/jobs/{id}", Project: projectOfJob, Perm: PermJobsRead, Kinds: usersJobs, Scope: scopeOwnJob, Summary: "A job with its attempts and, while pending, why it waits.",
			Response: JobView{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.getJob }},
		{Method: "POST", Pattern: "/v1/jobs/{id}/cancel", Project: projectOfJob, Perm: PermJobsCancel, Kinds: users, Summary: "Cancel a job: running replicas get their checkpoint signal and grace period.",
			Response: JobView{}, Status: 202,
			handler: func(s *Server) http.HandlerFunc { return s.cancelJob }},
		{Method: "POST", Pattern: "/v1/jobs/{id}/checkpoints", Project: projectOfJob, Perm: PermJobsCheckpoint, Kinds: usersJobs, Scope: scopeOwnJob,
			Summary: "Report a completed checkpoint (a job's own token may): work lost by preempting the job is measured from now.",
			Request: CheckpointReport{}, Response: JobView{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.reportCheckpoint }},
		{Method: "GET", Pattern: "/v1/jobs/{id}/logs", Project: projectOfJob, Perm: PermJobsRead, Kinds: usersJobs, Scope: scopeOwnJob, Summary: "A replica's combined stdout and stderr; follow=true streams until the attempt ends.",
			Query: []Param{{"attempt", "integer", "attempt number (default: latest)"}, {"rank", "integer", "replica rank (default 0)"},
				{"follow", "boolean", "stream until the attempt ends"}, {"offset", "integer", "byte offset to start at"}},
			ResponseType: "text/plain", Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.jobLogs }},
		{Method: "GET", Pattern: "/v1/jobs/{id}/explain", Project: projectOfJob, Perm: PermJobsRead, Kinds: usersJobs, Scope: scopeOwnJob, Summary: "Why a job waits: queue position, reasons per node group, queue and offer, estimated start, reservation and candidates.",
			Response: Explanation{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.explainJob }},
		{Method: "GET", Pattern: "/v1/queues", Perm: PermQueuesRead, Kinds: users, Summary: "Queues with their quota, cohort, weight and current use.",
			Response: QueueList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listQueues }},
		{Method: "GET", Pattern: "/v1/queues/{name}", Perm: PermQueuesRead, Kinds: users, Summary: "One queue; \"default\" exists implicitly.",
			Response: QueueView{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.getQueue }},
		{Method: "PUT", Pattern: "/v1/queues/{name}", Perm: PermQueuesManage, Kinds: users, Summary: "Create or replace a queue (a Queue manifest as JSON or YAML).",
			Request: QueueManifest{}, Response: QueueView{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.putQueue }},
		{Method: "DELETE", Pattern: "/v1/queues/{name}", Perm: PermQueuesManage, Kinds: users, Summary: "Delete a queue without running work; its queued jobs wait until it exists again.",
			Status:  204,
			handler: func(s *Server) http.HandlerFunc { return s.deleteQueue }},
		{Method: "POST", Pattern: "/v1/plan", Perm: PermFleetRead, Kinds: users, Summary: "Diff fleet documents (NodePool, Queue, Project) against the current revision, with each pool's cost per hour at min and max size.",
			Request: FleetRequest{}, Response: PlanView{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.plan }},
		{Method: "POST", Pattern: "/v1/apply", Perm: PermFleetManage, Kinds: users, Summary: "Record the documents as a new fleet revision and apply it (200 and no revision when nothing changed).",
			Request: FleetRequest{}, Response: ApplyView{}, Status: 201,
			handler: func(s *Server) http.HandlerFunc { return s.apply }},
		{Method: "GET", Pattern: "/v1/revisions", Perm: PermFleetRead, Kinds: users, Summary: "Fleet revisions, oldest first, without their documents.",
			Response: RevisionList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listRevisions }},
		{Method: "GET", Pattern: "/v1/revisions/{number}", Perm: PermFleetRead, Kinds: users, Summary: "One fleet revision with its documents.",
			Response: model.Revision{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.getRevision }},
		{Method: "POST", Pattern: "/v1/rollback", Perm: PermFleetManage, Kinds: users, Summary: "Re-apply an earlier revision's documents as a new revision.",
			Request: RollbackRequest{}, Response: ApplyView{}, Status: 201,
			handler: func(s *Server) http.HandlerFunc { return s.rollback }},
		{Method: "GET", Pattern: "/v1/drift", Perm: PermFleetRead, Kinds: users, Summary: "Where the running fleet differs from the declared one: pool sizes, lost nodes, instances gone or unknown, queues changed outside the fleet.",
			Response: DriftReport{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.drift }},
		{Method: "GET", Pattern: "/v1/gitops", Perm: PermFleetRead, Kinds: users, Summary: "The git repository the server follows (--gitops-repo): its head commit, the revision that applied it, whether the fleet matches it, and the pending plan when not (404 when the server follows none).",
			Response: gitops.Status{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.gitopsStatus }},
		{Method: "GET", Pattern: "/v1/nodes", Perm: PermNodesRead, Kinds: users, Summary: "Nodes, their GPUs and what holds them.",
			Response: NodeList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listNodes }},
		{Method: "POST", Pattern: "/v1/nodes/{id}/interrupt", Perm: PermFleetManage, Kinds: users, Summary: "Inject a spot notice for a node's instance (a drill or demo); the node drains and its jobs requeue from their checkpoints.",
			Response: provider.Notice{}, Status: 202,
			handler: func(s *Server) http.HandlerFunc { return s.interruptNode }},
		{Method: "GET", Pattern: "/v1/events", Perm: PermNodesRead, Kinds: users, Summary: "Events (launch, launch-failed, failover, notice, drain, preempted, requeue, terminate, leak…), oldest first.",
			Query: []Param{{"kind", "string", "comma-separated event kinds"}, {"object", "string", "an object (job/ID, node/ID) or a job or node id"},
				{"job", "string", "a job id"}, {"node", "string", "a node id"}, {"since", "string", "RFC 3339 time or a duration such as 1h"},
				{"after", "integer", "only events with a higher seq (to follow)"}, {"limit", "integer", "most events to return, the latest (default 100)"}},
			Response: EventList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listEvents }},
		{Method: "GET", Pattern: "/v1/alerts", Perm: PermNodesRead, Kinds: users, Summary: "Recent alerts: idle jobs, XID errors that drained a node, queue waits.",
			Response: AlertList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listAlerts }},
		{Method: "GET", Pattern: "/v1/offers", Perm: PermOffersRead, Kinds: users, Summary: "Query the GPU catalog's offers.",
			Query: []Param{{"gpu", "string", "comma-separated GPU models"}, {"minGpuMemory", "string", "e.g. 40Gi"}, {"gpus", "integer", "GPUs per instance"},
				{"provider", "string", "comma-separated providers"}, {"region", "string", "comma-separated region patterns, e.g. us-*"},
				{"capacity", "string", "comma-separated capacity types (on-demand, spot)"}, {"maxPrice", "number", "max $/h per instance"},
				{"sort", "string", "price | total | memory | gpus"}, {"limit", "integer", "most offers to return"}},
			Response: OfferList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listOffers }},
		{Method: "GET", Pattern: "/v1/offers/unavailable", Perm: PermOffersRead, Kinds: users, Summary: "Offers and pool regions that providers cannot sell now (insufficient capacity, quota), skipped by new capacity until a time.",
			Response: UnavailableList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listUnavailable }},
		{Method: "POST", Pattern: "/v1/advise", Perm: PermOffersRead, Kinds: users, Summary: "Rank the catalog's offers for a workload profile: memory per GPU, parallel plan, time and cost to finish.",
			Request: advisor.Request{}, Response: advisor.Result{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.advise }},
		{Method: "GET", Pattern: "/v1/projects", Perm: PermProjectsRead, Kinds: users, Summary: "Projects the caller holds a role in, with the role and the project's declared policy.",
			Response: ProjectList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listProjects }},
		{Method: "GET", Pattern: "/v1/grants", Perm: PermUsersManage, Kinds: users, Summary: "Every user's role per project.",
			Response: GrantList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listGrants }},
		{Method: "PUT", Pattern: "/v1/grants", Perm: PermUsersManage, Kinds: users, Summary: "Grant a user (a user token's subject) a role in a project, replacing the role they held there; admin is granted on project \"*\".",
			Request: model.Grant{}, Response: model.Grant{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.putGrant }},
		{Method: "DELETE", Pattern: "/v1/grants/{user}/{project}", Perm: PermUsersManage, Kinds: users, Summary: "Revoke a user's role in a project.",
			Status:  204,
			handler: func(s *Server) http.HandlerFunc { return s.deleteGrant }},
		{Method: "GET", Pattern: "/v1/audit", Perm: PermAuditRead, Kinds: users, Summary: "The hash-chained audit log of every mutation and refused request, oldest first.",
			Query:    []Param{{"after", "integer", "only entries with a higher sequence number"}, {"limit", "integer", "most entries to return"}},
			Response: AuditList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listAudit }},
		{Method: "POST", Pattern: "/v1/tokens/rotate", Perm: PermTokensRotate, Kinds: users, Summary: "Replace the caller's own token: the new secret is returned once and the old token is revoked at once.",
			Response: TokenCreated{}, Status: 201,
			handler: func(s *Server) http.HandlerFunc { return s.rotateToken }},
		{Method: "POST", Pattern: "/v1/tokens", Perm: PermTokensManage, Kinds: users, Summary: "Create a user or agent token; its secret is returned once.",
			Request: TokenCreate{}, Response: TokenCreated{}, Status: 201,
			handler: func(s *Server) http.HandlerFunc { return s.createToken }},
		{Method: "GET", Pattern: "/v1/tokens", Perm: PermTokensManage, Kinds: users, Summary: "Tokens that have not expired (never their secrets).",
			Response: TokenList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listTokens }},
		{Method: "DELETE", Pattern: "/v1/tokens/{id}", Perm: PermTokensManage, Kinds: users, Summary: "Revoke a token at once.",
			Status:  204,
			handler: func(s *Server) http.HandlerFunc { return s.revokeToken }},
		{Method: "POST", Pattern: "/v1/archives", Project: projectOfQuery, Perm: PermJobsSubmit, Kinds: users, MaxBody: MaxArchiveBytes,
			Summary: "Upload a job's working directory as a tar.gz (gpufleet run --upload-workdir) for a project; answers its content address, which jobs of that project (only) may name in spec.run.archive.",
			Query: []Param{{"digest", "string", "the archive's sha256:<hex>, checked on arrival"},
				{"project", "string", "the project whose jobs may use it (default \"default\"); the caller must be a member there"}},
			Response: ArchiveUploaded{}, Status: 201,
			handler: func(s *Server) http.HandlerFunc { return s.uploadArchive }},
		{Method: "GET", Pattern: "/v1/archives/{digest}", Perm: PermAgent, Kinds: agents,
			Summary: "Agent protocol: download an uploaded working directory by content address; only the archive of a job with a replica desired on the token's node (any other: 404).", ResponseType: "application/gzip", Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.downloadArchive }},
		{Method: "POST", Pattern: "/v1/agent/join", Perm: PermAgentJoin, Kinds: joiners,
			Summary: "A launched instance's first contact: exchange its one-time join token (the bearer) for its node's agent token, once, for the instance its launch returned.",
			Request: agentapi.JoinRequest{}, Response: agentapi.JoinResponse{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.agentJoin }},
		{Method: "POST", Pattern: "/v1/agent/register", Perm: PermAgent, Kinds: agents, Scope: scopeOwnNode,
			Summary: "Agent protocol: announce the token's node and its GPUs (creates the node on first registration).",
			Request: agentapi.Registration{}, Response: agentapi.RegisterResponse{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.agentRegister }},
		{Method: "POST", Pattern: "/v1/agent/sync", Perm: PermAgent, Kinds: agents, Scope: scopeOwnNode,
			Summary: "Agent protocol: report replica statuses and get the node's desired replicas; waits up to wait (at most 30s) for a change. 404: register again.",
			Request: agentapi.SyncRequest{}, Response: agentapi.SyncResponse{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.agentSync }},
		{Method: "POST", Pattern: "/v1/agent/logs", Perm: PermAgent, Kinds: agents, Scope: scopeOwnNode,
			Summary: "Agent protocol: store a chunk of a replica's output at its offset; the answer says where to continue.",
			Request: agentapi.LogChunk{}, Response: agentapi.LogAck{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.agentLogs }},
	}, append(append(append(append(costRoutes(), secretRoutes()...), serviceRoutes()...), artifactRoutes()...), dashboardRoutes()...)...)
}
