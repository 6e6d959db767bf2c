package controller

import (
	"github.com/gpufleet/gpufleet/internal/controller/auditlog"
	"github.com/gpufleet/gpufleet/internal/controller/identity"
	"github.com/gpufleet/gpufleet/internal/controller/vault"
	"github.com/gpufleet/gpufleet/internal/model"
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

// Vault is the controller's sealed secrets, which jobs and budget webhooks
// name. It has its own lock.
func (c *Controller) Vault() *vault.Vault { return c.vault }
