package identity

import (
	"context"
	"fmt"
	"sort"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Grant gives a user a role in a project, replacing any role they held there.
func (id *Identity) Grant(ctx context.Context, g model.Grant) (model.Grant, error) {
	if fe := g.Validate(""); len(fe) > 0 {
		return model.Grant{}, fmt.Errorf("grant: %w: %w", fe, model.ErrConflict)
	}
	g.CreatedAt = id.cfg.Clock.Now()
	id.mu.Lock()
	id.grants[grantKey{g.User, g.Project}] = g
	wait := id.cfg.Committer.Commit(&store.Batch{Access: store.Access{Grants: []model.Grant{g}}})
	id.mu.Unlock()
	if err := wait(ctx); err != nil {
		return model.Grant{}, fmt.Errorf("recording grant: %w", err)
	}
	return g, nil
}

// RevokeGrant removes a user's role in a project.
func (id *Identity) RevokeGrant(ctx context.Context, user, project string) error {
	k := grantKey{user, project}
	id.mu.Lock()
	if _, ok := id.grants[k]; !ok {
		id.mu.Unlock()
		return fmt.Errorf("grant of %s in %s: %w", user, project, model.ErrNotFound)
	}
	delete(id.grants, k)
	wait := id.cfg.Committer.Commit(&store.Batch{Access: store.Access{DeleteGrants: []store.GrantKey{{User: user, Project: project}}}})
	id.mu.Unlock()
	return wait(ctx)
}

// Grants lists every grant by user, then project.
func (id *Identity) Grants() []model.Grant {
	id.mu.RLock()
	out := make([]model.Grant, 0, len(id.grants))
	for _, g := range id.grants {
		out = append(out, g)
	}
	id.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		return out[i].User < out[j].User || out[i].User == out[j].User && out[i].Project < out[j].Project
	})
	return out
}

// RoleIn returns the role a user token holds in project: admin for an admin
// token or a global admin grant, else the user's grant there, else "".
func (id *Identity) RoleIn(t *model.Token, project string) model.Role {
	if t == nil || t.Kind != model.TokenUser {
		return ""
	}
	if t.Admin {
		return model.RoleAdmin
	}
	id.mu.RLock()
	defer id.mu.RUnlock()
	if g, ok := id.grants[grantKey{t.Subject, model.AllProjects}]; ok && g.Role == model.RoleAdmin {
		return model.RoleAdmin
	}
	return id.grants[grantKey{t.Subject, project}].Role
}

// Roles returns the projects a user token holds a role in and the role, and
// whether it is a global admin (then the map is nil: every project).
func (id *Identity) Roles(t *model.Token) (map[string]model.Role, bool) {
	if t == nil || t.Kind != model.TokenUser {
		return map[string]model.Role{}, false
	}
	if t.Admin {
		return nil, true
	}
	id.mu.RLock()
	defer id.mu.RUnlock()
	out := map[string]model.Role{}
	for k, g := range id.grants {
		if k.user != t.Subject {
			continue
		}
		if g.Role == model.RoleAdmin {
			return nil, true
		}
		out[k.project] = g.Role
	}
	return out, false
}
