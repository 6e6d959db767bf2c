package api

import (
	"time"

	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// JobManifest is the body of a job submission (DESIGN.md §2).
type JobManifest = manifest.Job

// JobView is a job as the API shows it.
type JobView struct {
	*model.Job
	// AttemptDetails lists every attempt, oldest first.
	AttemptDetails []*model.Attempt `json:"attemptDetails,omitempty"`
	// Pending explains why a queued job waits.
	Pending *scheduler.Verdict `json:"pending,omitempty"`
}

// JobList is the body of GET /v1/jobs.
type JobList struct {
	Jobs []*model.Job `json:"jobs"`
}

// NodeList is the body of GET /v1/nodes.
type NodeList struct {
	Nodes []controller.NodeInfo `json:"nodes"`
}

// OfferList is the body of GET /v1/offers.
type OfferList struct {
	Offers []model.Offer `json:"offers"`
}

// VersionInfo describes the server.
type VersionInfo struct {
	Version    string `json:"version"`
	GoVersion  string `json:"goVersion"`
	APIVersion string `json:"apiVersion"`
}

// TokenCreate asks for a token.
type TokenCreate struct {
	// Kind is user or agent.
	Kind model.TokenKind `json:"kind"`
	// Subject is the user name or node id the token speaks for.
	Subject string         `json:"subject"`
	Name    string         `json:"name,omitempty"`
	Admin   bool           `json:"admin,omitempty"`
	TTL     model.Duration `json:"ttl"`
}

// TokenCreated carries the secret, shown only once.
type TokenCreated struct {
	Token  *model.Token `json:"token"`
	Secret string       `json:"secret"`
}

// TokenList is the body of GET /v1/tokens.
type TokenList struct {
	Tokens []*model.Token `json:"tokens"`
}

// maxTokenTTL bounds tokens created through the API.
const maxTokenTTL = 366 * 24 * time.Hour
