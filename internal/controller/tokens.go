package controller

import (
	"github.com/gpufleet/gpufleet/internal/controller/auditlog"
	"github.com/gpufleet/gpufleet/internal/controller/identity"
	"github.com/gpufleet/gpufleet/internal/controller/vault"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// ErrUnauthenticated: the token is unknown, expired or revoked.
var ErrUnauthenticated = identity.ErrUnauthenticated

// TokenRequest is model.TokenRequest, declared there so the API and its
// client need not import the controller.
type TokenRequest = model.TokenRequest

// Identity is the controller's tokens, job tokens, sessions and grants:
// what the API authenticates and authorises with. It has its own lock.
func (c *Controller) Identity() *identity.Identity { return c.id }

// AuditLog is the controller's audit chain, which job submissions also
// append to. It has its own lock.
func (c *Controller) AuditLog() *auditlog.Log { return c.audit }

// StoredServices are the services the store held at start; the services
// manager, which owns them from then on, writes them through Committer.
func (c *Controller) StoredServices() []*model.Service { return c.services }

// Committer is the one committer the control plane's components share,
// for a component outside this package (the services manager) whose
// writes must reach the store in the same order, under the same fence.
func (c *Controller) Committer() store.Committer { return c.com }

// Vault is the controller's sealed secrets, which jobs and budget webhooks
// name. It has its own lock.
func (c *Controller) Vault() *vault.Vault { return c.vault }
