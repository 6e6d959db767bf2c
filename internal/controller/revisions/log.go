package revisions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Declared is the fleet as one revision declares it. Its values are
// immutable.
type Declared struct {
	// Revision is nil before the first apply.
	Revision *model.Revision
	// Set is the revision's documents; empty, never nil, before the
	// first apply.
	Set *manifest.Set
	// Pools and Projects are by name; each keeps the number of the
	// revision that last changed its spec.
	Pools    []*model.NodePool
	Projects []*model.Project
}

// Log is the revision history. Its methods are safe for concurrent use.
type Log struct {
	mu   sync.RWMutex
	revs []*model.Revision // by number, from 1
	cur  Declared
}

// Load rebuilds a Log from the stored revisions, oldest first.
func Load(revs []*model.Revision) (*Log, error) {
	l := &Log{cur: Declared{Set: &manifest.Set{}}}
	for i, r := range revs {
		if r.Number != i+1 {
			return nil, fmt.Errorf("fleet revisions: want number %d, found %d", i+1, r.Number)
		}
		set, err := manifest.ParseStored(r.Documents)
		if err != nil {
			return nil, fmt.Errorf("fleet revision %d: %w", r.Number, err)
		}
		l.appendLocked(r, set)
	}
	return l, nil
}

// Current returns the newest revision's declared fleet.
func (l *Log) Current() Declared {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.cur
}

// Number returns the newest revision's number, 0 before the first apply.
func (l *Log) Number() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.revs)
}

// Revisions returns every revision, oldest first, without their documents.
func (l *Log) Revisions() []model.Revision {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]model.Revision, len(l.revs))
	for i, r := range l.revs {
		out[i] = *r
		out[i].Documents = nil
	}
	return out
}

// Revision returns revision n with its documents; model.ErrNotFound when
// there is none.
func (l *Log) Revision(n int) (*model.Revision, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if n < 1 || n > len(l.revs) {
		return nil, fmt.Errorf("fleet revision %d: %w", n, model.ErrNotFound)
	}
	return l.revs[n-1], nil
}

// Append makes r, whose documents are set, the newest revision and
// returns what it declares. r must be numbered one past the newest
// (model.ErrConflict otherwise: another apply came first).
func (l *Log) Append(r *model.Revision, set *manifest.Set) (Declared, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Number != len(l.revs)+1 {
		return Declared{}, fmt.Errorf("fleet revision %d: the fleet is at revision %d: %w", r.Number, len(l.revs), model.ErrConflict)
	}
	l.appendLocked(r, set)
	return l.cur, nil
}

// appendLocked advances the declared fleet to r. A pool or project keeps
// the revision that last changed its spec.
func (l *Log) appendLocked(r *model.Revision, set *manifest.Set) {
	oldPools := map[string]*model.NodePool{}
	for _, p := range l.cur.Pools {
		oldPools[p.Name] = p
	}
	oldProjects := map[string]*model.Project{}
	for _, p := range l.cur.Projects {
		oldProjects[p.Name] = p
	}
	pools := make([]*model.NodePool, 0, len(set.NodePools))
	for _, doc := range set.NodePools {
		p := &model.NodePool{Name: doc.Metadata.Name, Spec: doc.Spec, Revision: r.Number}
		if old, ok := oldPools[p.Name]; ok && sameJSON(old.Spec, p.Spec) {
			p.Revision = old.Revision
		}
		pools = append(pools, p)
	}
	projects := make([]*model.Project, 0, len(set.Projects))
	for _, doc := range set.Projects {
		p := &model.Project{Name: doc.Metadata.Name, Spec: doc.Spec, Revision: r.Number}
		if old, ok := oldProjects[p.Name]; ok && sameJSON(old.Spec, p.Spec) {
			p.Revision = old.Revision
		}
		projects = append(projects, p)
	}
	l.revs = append(slices.Clip(l.revs), r)
	l.cur = Declared{Revision: r, Set: set, Pools: pools, Projects: projects}
}

// sameJSON reports whether a and b encode to the same JSON.
func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
