package store

import "github.com/gpufleet/gpufleet/internal/model"

// Access is the part of a Batch that records who may do what, and what
// they did (issue 9).
type Access struct {
	// Grants are upserted by (user, project); DeleteGrants removes grants
	// (after the upserts).
	Grants       []model.Grant
	DeleteGrants []GrantKey
	// Audit entries are appended by sequence number and never change; an
	// entry already stored is left as it is, so a retried write is harmless.
	Audit []*model.AuditEntry
	// Secrets are upserted by (project, name), sealed; DeleteSecrets
	// removes them (after the upserts).
	Secrets       []model.Secret
	DeleteSecrets []SecretKey
}

func (a *Access) empty() bool {
	return len(a.Grants)+len(a.DeleteGrants)+len(a.Audit)+len(a.Secrets)+len(a.DeleteSecrets) == 0
}

// SecretKey names one secret.
type SecretKey struct{ Project, Name string }

// GrantKey names one grant.
type GrantKey struct{ User, Project string }

// AccessDump is what Load returns of access control.
type AccessDump struct {
	Grants []model.Grant
	// AuditHead is the newest audit entry (nil when the log is empty), so
	// the controller chains the next entry to it.
	AuditHead *model.AuditEntry
	// Secrets are every sealed secret.
	Secrets []model.Secret
}
