package controller

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/gpufleet/gpufleet/internal/audit"
	"github.com/gpufleet/gpufleet/internal/auth"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// grantKey names one grant in memory.
type grantKey struct{ user, project string }

// loadAccess takes the stored grants and the audit log's head.
func (c *Controller) loadAccess(d store.AccessDump) {
	for _, g := range d.Grants {
		c.grants[grantKey{g.User, g.Project}] = g
	}
	if d.AuditHead != nil {
		c.auditSeq, c.auditHash = d.AuditHead.Seq, d.AuditHead.Hash
	}
}

// Grant gives a user a role in a project, replacing any role they held there.
func (c *Controller) Grant(ctx context.Context, g model.Grant) (model.Grant, error) {
	if fe := g.Validate(""); len(fe) > 0 {
		return model.Grant{}, fmt.Errorf("grant: %w: %w", fe, ErrConflict)
	}
	g.CreatedAt = c.cfg.Clock.Now()
	c.mu.Lock()
	c.grants[grantKey{g.User, g.Project}] = g
	cm := c.com.submit(&store.Batch{Access: store.Access{Grants: []model.Grant{g}}})
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return model.Grant{}, fmt.Errorf("recording grant: %w", err)
	}
	return g, nil
}

// RevokeGrant removes a user's role in a project.
func (c *Controller) RevokeGrant(ctx context.Context, user, project string) error {
	c.mu.Lock()
	k := grantKey{user, project}
	if _, ok := c.grants[k]; !ok {
		c.mu.Unlock()
		return fmt.Errorf("grant of %s in %s: %w", user, project, ErrNotFound)
	}
	delete(c.grants, k)
	cm := c.com.submit(&store.Batch{Access: store.Access{DeleteGrants: []store.GrantKey{{User: user, Project: project}}}})
	c.mu.Unlock()
	return cm.wait(ctx)
}

// Grants lists every grant by user, then project.
func (c *Controller) Grants() []model.Grant {
	c.mu.Lock()
	out := make([]model.Grant, 0, len(c.grants))
	for _, g := range c.grants {
		out = append(out, g)
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		return out[i].User < out[j].User || out[i].User == out[j].User && out[i].Project < out[j].Project
	})
	return out
}

// RoleIn returns the role a user token holds in project: admin for an admin
// token or a global admin grant, else the user's grant there, else "".
func (c *Controller) RoleIn(t *model.Token, project string) model.Role {
	if t == nil || t.Kind != model.TokenUser {
		return ""
	}
	if t.Admin {
		return model.RoleAdmin
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if g, ok := c.grants[grantKey{t.Subject, model.AllProjects}]; ok && g.Role == model.RoleAdmin {
		return model.RoleAdmin
	}
	return c.grants[grantKey{t.Subject, project}].Role
}

// Roles returns the projects a user token holds a role in and the role, and
// whether it is a global admin (then the map is nil: every project).
func (c *Controller) Roles(t *model.Token) (map[string]model.Role, bool) {
	if t == nil || t.Kind != model.TokenUser {
		return map[string]model.Role{}, false
	}
	if t.Admin {
		return nil, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]model.Role{}
	for k, g := range c.grants {
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

// Audit appends e to the hash-chained audit log and waits until it is
// durable. It sets e's time, sequence number and hashes.
func (c *Controller) Audit(ctx context.Context, e model.AuditEntry) (model.AuditEntry, error) {
	e.Time = c.cfg.Clock.Now()
	c.mu.Lock()
	audit.Link(c.auditSeq, c.auditHash, &e)
	c.auditSeq, c.auditHash = e.Seq, e.Hash
	entry := e
	cm := c.com.submit(&store.Batch{Access: store.Access{Audit: []*model.AuditEntry{&entry}}})
	c.mu.Unlock()
	if err := cm.wait(context.WithoutCancel(ctx)); err != nil {
		return e, fmt.Errorf("recording audit entry: %w", err)
	}
	return e, nil
}

// JobProject returns the project of a job or array job.
func (c *Controller) JobProject(id string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if j, ok := c.st.Job(id); ok {
		return j.Project, true
	}
	if tasks := c.st.ArrayTasks(id); len(tasks) > 0 {
		return tasks[0].Project, true
	}
	return "", false
}

// RotateToken mints a token like id's (kind, subject, name, admin), valid
// for as long as id was meant to live, and revokes id, in one batch.
func (c *Controller) RotateToken(ctx context.Context, id string) (*model.Token, string, error) {
	c.mu.Lock()
	old, ok := c.tokenIDs[id]
	c.mu.Unlock()
	if !ok {
		return nil, "", fmt.Errorf("token %s: %w", id, ErrNotFound)
	}
	if old.Kind == model.TokenJob {
		return nil, "", fmt.Errorf("job tokens end with their job: %w", ErrConflict)
	}
	ttl := old.ExpiresAt.Sub(old.CreatedAt)
	tok, secret, err := auth.New(old.Kind, old.Subject, old.Name, c.cfg.Clock.Now(), ttl)
	if err != nil {
		return nil, "", err
	}
	tok.Admin = old.Admin
	c.mu.Lock()
	gone := revoked(c.tokenIDs[id])
	c.putToken(gone)
	c.putToken(tok)
	cm := c.com.submit(&store.Batch{Tokens: []*model.Token{gone, tok}})
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return nil, "", fmt.Errorf("recording rotated token: %w", err)
	}
	return tok, secret, nil
}

// admitLocked applies the policy of the submission's project (its Project
// document, if declared) to the spec: allowed GPU models, GPUs per job,
// allowed regions (data residency) and price. A job that leaves regions or
// price open inherits the project's limits, so the scheduler enforces them;
// one that asks for more is refused with field paths. Callers hold c.mu.
func (c *Controller) admitLocked(s *Submission) model.FieldErrors {
	var p *model.Project
	for _, x := range c.fleet.projects {
		if x.Name == s.Project {
			p = x
		}
	}
	if p == nil {
		return nil
	}
	var fe model.FieldErrors
	pol := p.Spec
	res := s.Spec.Resources
	if len(pol.AllowedGPUs) > 0 && res.GPUs > 0 {
		if len(res.GPU.Models) == 0 {
			fe.Add("spec.resources.gpu.models", fmt.Sprintf("project %s allows only %s: name the models", p.Name, strings.Join(pol.AllowedGPUs, ", ")))
		}
		for i, m := range res.GPU.Models {
			if !slices.ContainsFunc(pol.AllowedGPUs, func(a string) bool { return strings.EqualFold(a, m) }) {
				fe.Add(fmt.Sprintf("spec.resources.gpu.models[%d]", i), fmt.Sprintf("project %s does not allow %s (allowed: %s)", p.Name, m, strings.Join(pol.AllowedGPUs, ", ")))
			}
		}
	}
	if total := float64(max(1, s.Spec.Replicas)) * res.GPUs; pol.MaxGPUsPerJob > 0 && total > pol.MaxGPUsPerJob {
		fe.Add("spec.resources.gpus", fmt.Sprintf("the job asks for %g GPUs; project %s allows at most %g per job", total, p.Name, pol.MaxGPUsPerJob))
	}
	if pol.MaxPricePerHour > 0 {
		switch {
		case s.Spec.MaxPricePerHour == 0:
			s.Spec.MaxPricePerHour = pol.MaxPricePerHour
		case s.Spec.MaxPricePerHour > pol.MaxPricePerHour:
			fe.Add("spec.maxPricePerHour", fmt.Sprintf("project %s allows at most $%g/h", p.Name, pol.MaxPricePerHour))
		}
	}
	if len(pol.AllowedRegions) > 0 {
		if len(s.Spec.Regions.Allow) == 0 {
			s.Spec.Regions.Allow = slices.Clone(pol.AllowedRegions)
		}
		for i, r := range s.Spec.Regions.Allow {
			if !slices.ContainsFunc(pol.AllowedRegions, func(a string) bool { ok, _ := path.Match(a, r); return a == r || ok }) {
				fe.Add(fmt.Sprintf("spec.regions.allow[%d]", i), fmt.Sprintf("%q is outside project %s's allowed regions (%s)", r, p.Name, strings.Join(pol.AllowedRegions, ", ")))
			}
		}
	}
	return fe
}
