package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet/internal/controller/revisions"
	"github.com/gpufleet/gpufleet/internal/fleet"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// declared is the fleet as the current revision declares it, the
// controller's copy of revisions.Log.Current for its own passes. Guarded
// by Controller.mu; every value is replaced, never modified.
type declared struct {
	set      *manifest.Set
	pools    []*model.NodePool // by name
	projects []*model.Project  // by name
}

// adopt makes d what the log's current revision declares.
func (d *declared) adopt(cur revisions.Declared) {
	d.set, d.pools, d.projects = cur.Set, cur.Pools, cur.Projects
}

// loadRevisions rebuilds the revision log and the declared fleet from the
// stored revisions.
func (c *Controller) loadRevisions(revs []*model.Revision) error {
	log, err := revisions.Load(revs)
	if err != nil {
		return err
	}
	c.revs = log
	c.fleet.adopt(log.Current())
	c.st.SetProjectQuotas(projectQuotas(c.fleet.projects))
	c.st.SetPriorityClasses(priorityClasses(c.fleet.set))
	c.warnInlineWebhooksLocked()
	return nil
}

// warnInlineWebhooksLocked logs, once per budget, that the current
// revision names its webhook by an inline URL, the form before secret
// references: it still notifies, but the URL stays in clear in the
// database, and apply refuses the form, so the budget must be moved before
// it can be changed. The URL itself is not logged.
func (c *Controller) warnInlineWebhooksLocked() {
	cur := c.revs.Current().Revision
	for _, b := range c.fleet.set.Budgets {
		if !b.Spec.Webhook.Legacy() {
			continue
		}
		args := []any{"budget", b.Metadata.Name, "revision", cur.Number,
			"fix", "printf %s \"$URL\" | gpufleet secrets set PROJECT NAME; then write spec.webhook: {secretRef: PROJECT/NAME} " +
				"(and signingKeyRef: PROJECT/KEY_NAME for a key of its own) and gpufleet apply"}
		if len(c.cfg.Cost.WebhookSecret) == 0 {
			args = append(args, "unsigned", "this server has no --webhook-secret to sign the budget's firings with: they are retried for a day, then dropped")
		}
		c.cfg.Log.Warn("budget webhook is an inline URL written by an earlier version; move it into a secret and re-apply", args...)
	}
}

// projectQuotas is the scheduler's view of the projects' GPU quotas
// (Project.spec.quota), which it enforces.
func projectQuotas(ps []*model.Project) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, p := range ps {
		if len(p.Spec.Quota) > 0 {
			out[p.Name] = p.Spec.Quota
		}
	}
	return out
}

// priorityClasses are the classes the set declares, by name.
func priorityClasses(set *manifest.Set) []model.PriorityClass {
	out := make([]model.PriorityClass, 0, len(set.PriorityClasses))
	for i := range set.PriorityClasses {
		out = append(out, set.PriorityClasses[i].Class())
	}
	return out
}

func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// NodePools returns the pools the current fleet revision declares, by
// name; empty before the first apply.
//
// Contract for reconcilers (the autoscaler): the result and the pools in
// it are immutable snapshots — a later apply replaces them, never edits
// them. A pool's Revision changes exactly when its spec does, so comparing
// it with the last one acted on tells what to reconcile. A pool missing from
// a later call was deleted: its nodes should be drained and terminated.
// Changed() fires after every apply. Safe for concurrent use.
func (c *Controller) NodePools() []*model.NodePool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.fleet.pools)
}

// NodePool returns one declared pool.
func (c *Controller) NodePool(name string) (*model.NodePool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.fleet.pools {
		if p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// Projects returns the projects the current fleet revision declares, by
// name, as immutable snapshots. Enforcing their limits is admission's job.
func (c *Controller) Projects() []*model.Project {
	return slices.Clone(c.revs.Current().Projects)
}

// Declared returns the current revision (nil before the first apply) and
// its documents. Both are immutable.
func (c *Controller) Declared() (*model.Revision, *manifest.Set) {
	cur := c.revs.Current()
	return cur.Revision, cur.Set
}

// PlanBase returns the current revision and the documents a plan of
// desired is to be diffed against: what applying desired would change.
// That is the declared fleet with its queues as they live — a declared
// queue changed through the queue API shows its live spec, one deleted
// there is gone (an apply does not delete it again) — plus the live
// queues desired names that the fleet does not declare (made with
// `gpufleet queues apply`): applying desired updates them, it does not
// create them.
func (c *Controller) PlanBase(desired *manifest.Set) (*model.Revision, *manifest.Set) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.revs.Current().Revision
	base := manifest.Set{}
	if c.fleet.set != nil {
		base = *c.fleet.set
	}
	names := map[string]bool{}
	for _, q := range base.Queues {
		names[q.Metadata.Name] = true
	}
	if desired != nil {
		for _, q := range desired.Queues {
			names[q.Metadata.Name] = true
		}
	}
	base.Queues = nil
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if live, ok := c.st.Queue(name); ok {
			base.Queues = append(base.Queues, manifest.Queue{APIVersion: manifest.APIVersion, Kind: manifest.KindQueue,
				Metadata: manifest.ObjectMeta{Name: name}, Spec: live.Spec})
		}
	}
	return cur, &base
}

// Revisions returns every revision, oldest first, without their documents.
func (c *Controller) Revisions() []model.Revision { return c.revs.Revisions() }

// Revision returns revision n with its documents.
func (c *Controller) Revision(n int) (*model.Revision, error) { return c.revs.Revision(n) }

// ApplyOptions is model.ApplyOptions, declared there so the API and its
// client need not import the controller.
type ApplyOptions = model.ApplyOptions

// ApplyResult is model.ApplyResult, declared there so the API and its client
// need not import the controller.
type ApplyResult = model.ApplyResult

// ApplyFleet records desired (validated, e.g. by manifest.Parse) as a new
// revision and applies it: pools and projects become the declared ones,
// declared queues are created or replaced as through PutQueue, and queues
// the current revision declared but desired drops are deleted. The
// revision and every queue change are one durable commit, so a crash keeps
// both or neither. A dropped queue with running work fails the whole apply
// with ErrConflict before anything changes. Applying the current documents
// again records nothing.
func (c *Controller) ApplyFleet(ctx context.Context, desired *manifest.Set, opts ApplyOptions) (ApplyResult, error) {
	docs, digest := desired.Documents()
	c.mu.Lock()
	cur := c.revs.Current().Revision
	curNum := 0
	if cur != nil {
		curNum = cur.Number
	}
	if opts.BaseRevision != 0 && opts.BaseRevision != curNum {
		c.mu.Unlock()
		return ApplyResult{}, fmt.Errorf("the fleet is at revision %d, not %d as planned; plan again: %w", curNum, opts.BaseRevision, ErrConflict)
	}
	if cur != nil && cur.Digest == digest || cur == nil && desired.Len() == 0 {
		c.mu.Unlock()
		return ApplyResult{Revision: cur}, nil
	}
	// 1. Check every queue deletion, and that the webhooks' secrets
	// exist, before changing anything.
	if fe := c.checkWebhooksLocked(desired); len(fe) > 0 {
		c.mu.Unlock()
		return ApplyResult{}, fe
	}
	want := map[string]bool{}
	for _, q := range desired.Queues {
		want[q.Metadata.Name] = true
	}
	var drop []string
	for _, q := range c.fleet.set.Queues {
		name := q.Metadata.Name
		if want[name] {
			continue
		}
		if _, ok := c.st.Queue(name); !ok {
			continue // already deleted through the queue API
		}
		if use := c.st.QueueUse(name); len(use) > 0 {
			c.mu.Unlock()
			return ApplyResult{}, fmt.Errorf("queue %s, which the fleet no longer declares, has running work (%v GPUs); cancel or wait for it first: %w", name, use, ErrConflict)
		}
		drop = append(drop, name)
	}
	// 2. Change memory: queues, then the declared fleet.
	b := &store.Batch{DeleteQueues: drop}
	for _, name := range drop {
		c.st.DeleteQueue(name)
	}
	for _, q := range desired.Queues {
		if live, ok := c.st.Queue(q.Metadata.Name); ok && sameJSON(live.Spec, q.Spec) {
			continue
		}
		nq, _ := c.putQueueLocked(q.Metadata.Name, q.Spec)
		b.Queues = append(b.Queues, nq)
	}
	rev := &model.Revision{
		Number: curNum + 1, CreatedAt: c.cfg.Clock.Now(), Author: opts.Author, Message: opts.Message,
		RollbackOf: opts.RollbackOf, Commit: opts.Commit, CommitAuthor: opts.CommitAuthor, Digest: digest, Documents: docs,
	}
	if rev.Documents == nil {
		rev.Documents = []json.RawMessage{}
	}
	decl, err := c.revs.Append(rev, desired)
	if err != nil {
		c.mu.Unlock() // not reached: c.mu orders every apply
		return ApplyResult{}, err
	}
	oldPools := c.fleet.pools
	c.fleet.adopt(decl)
	c.retirePoolsLocked(b, oldPools, c.fleet.pools)
	c.st.SetProjectQuotas(projectQuotas(c.fleet.projects))
	c.st.SetPriorityClasses(priorityClasses(c.fleet.set))
	b.Revisions = []*model.Revision{rev}
	if c.cfg.PoolsChanged != nil {
		c.cfg.PoolsChanged(c.fleet.pools, rev.CreatedAt)
	}
	c.adoptOwnedLocked(b)
	// 3. One commit for all of it.
	c.broadcastLocked()
	cm := c.com.submit(b)
	c.mu.Unlock()
	c.trigger()
	if err := cm.wait(ctx); err != nil {
		return ApplyResult{}, fmt.Errorf("recording fleet revision %d: %w", rev.Number, err)
	}
	c.cfg.Log.Info("fleet revision applied", "revision", rev.Number, "author", rev.Author, "pools", len(desired.NodePools),
		"queues", len(desired.Queues), "projects", len(desired.Projects), "queues_written", len(b.Queues), "queues_deleted", len(drop))
	return ApplyResult{Revision: rev, Changed: true}, nil
}

// Rollback applies revision to's documents again as a new revision.
func (c *Controller) Rollback(ctx context.Context, to int, opts ApplyOptions) (ApplyResult, error) {
	r, err := c.Revision(to)
	if err != nil {
		return ApplyResult{}, err
	}
	set, err := manifest.ParseStored(r.Documents)
	if err != nil {
		return ApplyResult{}, err
	}
	opts.RollbackOf = to
	if opts.Message == "" {
		opts.Message = fmt.Sprintf("rollback to revision %d", to)
	}
	return c.ApplyFleet(ctx, set, opts)
}

// Drift compares the declared fleet with the running one; see fleet.Drift.
// It asks Config.Inventory, when set, for the providers' instances first.
func (c *Controller) Drift(ctx context.Context) ([]fleet.Finding, error) {
	var inv map[string][]string
	if c.cfg.Inventory != nil {
		var err error
		if inv, err = c.cfg.Inventory(ctx); err != nil {
			return nil, fmt.Errorf("listing provider instances: %w", err)
		}
	}
	var machines []model.Node
	if c.cfg.Machines != nil {
		var err error
		if machines, err = c.cfg.Machines(ctx); err != nil {
			return nil, fmt.Errorf("listing declared machines: %w", err)
		}
	}
	c.mu.Lock()
	w := fleet.World{Pools: c.fleet.pools, Nodes: c.st.Nodes(), Inventory: inv, Machines: machines,
		DeclaredQueues: map[string]model.QueueSpec{}, LiveQueues: map[string]model.QueueSpec{}}
	for _, q := range c.fleet.set.Queues {
		w.DeclaredQueues[q.Metadata.Name] = q.Spec
	}
	for _, q := range c.st.Queues() {
		w.LiveQueues[q.Name] = q.Spec
	}
	c.mu.Unlock()
	return fleet.Drift(w), nil
}

// checkWebhooksLocked refuses budgets whose webhook names a secret the
// server does not hold, or that would be signed with no key. Callers hold
// c.mu.
func (c *Controller) checkWebhooksLocked(set *manifest.Set) model.FieldErrors {
	var fe model.FieldErrors
	for _, b := range set.Budgets {
		c.checkWebhookLocked(&fe, fmt.Sprintf("Budget/%s: spec.webhook", b.Metadata.Name), b.Spec.Webhook)
	}
	for _, n := range set.Notifications {
		c.checkWebhookLocked(&fe, fmt.Sprintf("Notification/%s: spec.receiver", n.Metadata.Name), n.Spec.Receiver)
	}
	slices.SortFunc(fe, func(a, b model.FieldError) int { return strings.Compare(a.Path, b.Path) })
	return fe
}

// checkWebhookLocked adds to fe, under path p, what is wrong with h as this
// server sees it. Callers hold c.mu.
func (c *Controller) checkWebhookLocked(fe *model.FieldErrors, p string, h *manifest.WebhookRef) {
	if h == nil {
		return
	}
	if h.Legacy() {
		// Only a stored revision holds one (a rollback to it); a new
		// revision must not record the URL in clear again.
		fe.Add(p, manifest.InlineWebhookHelp)
		return
	}
	for field, ref := range map[string]model.SecretRef{"secretRef": h.SecretRef, "signingKeyRef": h.SigningKeyRef} {
		if ref == "" {
			continue
		}
		if project, name, ok := ref.Split(); ok {
			if !c.vault.Has(project, name) {
				fe.Add(p+"."+field, fmt.Sprintf("project %s has no secret %s (gpufleet secrets set %s %s)", project, name, project, name))
			}
		}
	}
	if h.SigningKeyRef == "" && len(c.cfg.Cost.WebhookSecret) == 0 {
		fe.Add(p+".signingKeyRef", "is required: this server has no --webhook-secret to sign with")
	}
}

// webhookUsersLocked returns the budgets and notifications ("budget NAME",
// "notification NAME") whose webhook or receiver names the secret k.
// Callers hold c.mu.
func (c *Controller) webhookUsersLocked(k store.SecretKey) []string {
	var out []string
	if c.fleet.set == nil {
		return nil
	}
	for _, b := range c.fleet.set.Budgets {
		for _, ref := range b.Spec.Webhook.Refs() {
			if p, n, _ := ref.Split(); p == k.Project && n == k.Name {
				out = append(out, "budget "+b.Metadata.Name)
				break
			}
		}
	}
	for _, d := range c.fleet.set.Notifications {
		for _, ref := range d.Spec.Receiver.Refs() {
			if p, n, _ := ref.Split(); p == k.Project && n == k.Name {
				out = append(out, "notification "+d.Metadata.Name)
				break
			}
		}
	}
	return out
}

// placeOwnedLocked sets what the declared fleet says of an owned
// machine's node n (one whose provider is a c.cfg.Adopters): the pool
// that declares it and its amortised price, or no pool when none does. It
// reports whether n changed; the caller owns n (a clone).
func (c *Controller) placeOwnedLocked(n *model.Node) bool {
	a, ok := c.cfg.Adopters[n.Provider]
	if !ok {
		return false
	}
	pool, price := "", n.PricePerHour
	if p, pr, ok := a.Declared(n.ID); ok {
		pool, price = p, pr
	}
	if pool == n.Pool && price == n.PricePerHour {
		return false
	}
	n.Pool, n.PricePerHour = pool, price
	return true
}

// adoptOwnedLocked brings the nodes of owned machines in line with a new
// revision, once the adopters follow it (PoolsChanged): a machine added to
// a pool joins it, a machine removed leaves it. The changed nodes join
// batch b.
func (c *Controller) adoptOwnedLocked(b *store.Batch) {
	if len(c.cfg.Adopters) == 0 {
		return
	}
	for _, n := range c.st.ActiveNodes() {
		if _, ok := c.cfg.Adopters[n.Provider]; !ok || n.State == model.NodeTerminated {
			continue
		}
		m := n.Clone()
		if !c.placeOwnedLocked(m) {
			continue
		}
		m.Version++
		c.st.PutNode(m)
		b.Nodes = append(b.Nodes, m)
	}
}
