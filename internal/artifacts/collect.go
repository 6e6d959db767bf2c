package artifacts

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/objstore"
)

// maxRound bounds how long after a round began it may still delete: a
// process frozen mid-round (a paused old leader, a suspended VM) wakes
// with records older than the uploads since, and stops instead of acting
// on them.
const maxRound = time.Hour

// errStale: the round outlived maxRound.
var errStale = errors.New("the round outlived its view of the storage (frozen or very slow); stopping before deleting")

func (c *Catalog) stale(rd *round) bool { return c.cfg.Clock.Now().Sub(rd.now) > maxRound }

// namedCache computes each folder's named objects once per pass.
type namedCache map[*folder]map[string]bool

func (n namedCache) of(f *folder) map[string]bool {
	m := n[f]
	if m == nil {
		m = f.named()
		n[f] = m
	}
	return m
}

// collectPending deletes the objects retention left unnamed whose grace
// has passed: one HEAD each (for its age and ETag), then a delete
// conditional on that ETag, so an object written again since (an upload
// that found it too old to reuse) is never removed.
func (c *Catalog) collectPending(ctx context.Context, rd *round, pl place, r *records) (Report, error) {
	var rep Report
	named := namedCache{}
	for key, p := range r.pending {
		if p.f.dirty || p.f.bad || rd.now.Before(p.due) {
			continue
		}
		if named.of(p.f)[strings.TrimPrefix(key, p.f.prefix+"o/")] {
			delete(r.pending, key) // named again by a newer manifest
			continue
		}
		st, err := pl.store.Stat(ctx, key)
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			delete(r.pending, key)
			continue
		case err != nil:
			return rep, err
		case !st.Modified.Before(rd.cutoff):
			p.due = st.Modified.Add(c.cfg.Grace)
			continue
		}
		if c.stale(rd) {
			return rep, errStale
		}
		ok, err := objstore.DeleteIfMatch(ctx, pl.store, key, st.ETag)
		if err != nil {
			return rep, err
		}
		delete(r.pending, key)
		if ok {
			rep.Objects++
			rep.Bytes += st.Size
		}
	}
	return rep, nil
}

// sweep is garbage collection's walk over one storage's keys: it finds
// what no record explains (uploads that crashed before their manifest,
// objects left by a deleted checkpoint whose pending entry a restart
// lost) a bounded page per round, resuming at cursor.
type sweep struct {
	active  bool
	cursor  string    // the last key looked at
	started time.Time // when the current (or last) walk began
}

// owner is who a top-level folder of a storage belongs to.
type owner struct {
	r *records
	f *folder // nil for a project's index
}

// sweepStore advances the walk over the storage pl.id, whose projects'
// records are recs (by project). It holds those projects' locks while it
// judges a page, so no commit interleaves.
func (c *Catalog) sweepStore(ctx context.Context, rd *round, pl place, recs map[string]*records, places map[string]place) (Report, error) {
	var rep Report
	c.mu.Lock()
	sw := c.sweeps[pl.id]
	if sw == nil {
		sw = &sweep{}
		c.sweeps[pl.id] = sw
	}
	c.mu.Unlock()
	if !sw.active {
		if !sw.started.IsZero() && rd.now.Sub(sw.started) < c.cfg.SweepEvery {
			return rep, nil
		}
		sw.active, sw.cursor, sw.started = true, "", rd.now
	}
	projects := slices.Sorted(func(yield func(string) bool) {
		for p := range recs {
			if !yield(p) {
				return
			}
		}
	})
	var locks []*sync.Mutex
	for _, p := range projects {
		l := c.projectLock(p)
		l.Lock()
		locks = append(locks, l)
	}
	defer func() {
		for _, l := range locks {
			l.Unlock()
		}
	}()
	owners := map[string]owner{}
	for _, p := range projects {
		r := recs[p]
		owners[indexPrefix(places[p].seal)] = owner{r: r}
		for _, f := range r.jobs {
			owners[f.prefix] = owner{r: r, f: f}
		}
		for _, f := range r.sets {
			owners[f.prefix] = owner{r: r, f: f}
		}
	}
	var delErr error
	named := namedCache{}
	look := func(i objstore.Info) bool {
		rep.Swept++
		dir, rest, ok := strings.Cut(i.Key, "/")
		if !ok {
			return true
		}
		o, ok := owners[dir+"/"]
		switch {
		case !ok:
			return true // no project's (a deleted job's, another fleet's)
		case o.f == nil: // a project's index: <set>/<version>
			set, ver, ok := strings.Cut(rest, "/")
			if !ok {
				return true
			}
			f := o.r.sets[set]
			if f == nil {
				f = &folder{prefix: set + "/", set: set, ms: map[string]*known{}}
				o.r.sets[set] = f
			}
			if ver != setMarker && f.ms[i.Key] == nil {
				f.dirty = true // committed elsewhere: read it next round
			}
			return true
		}
		f := o.f
		if strings.HasPrefix(rest, "m/") && f.job != "" && f.ms[i.Key] == nil {
			f.dirty = true // a manifest this server has not read
			return true
		}
		name, ok := strings.CutPrefix(rest, "o/")
		if !ok || strings.Contains(name, "/") || f.dirty || f.bad || !i.Modified.Before(rd.cutoff) || named.of(f)[name] {
			return true
		}
		if c.stale(rd) {
			delErr = errStale
			return false
		}
		deleted, err := objstore.DeleteIfMatch(ctx, pl.store, i.Key, i.ETag)
		if err != nil {
			delErr = err
			return false
		}
		delete(o.r.pending, i.Key)
		if deleted {
			rep.Objects++
			rep.Bytes += i.Size
		}
		return true
	}
	// The cursor moves past a key once it has been dealt with: a walk
	// stopped by an error resumes at the key it failed on.
	more, err := objstore.ListAfter(ctx, pl.store, "", sw.cursor, c.cfg.SweepKeys, func(i objstore.Info) bool {
		if !look(i) {
			return false
		}
		sw.cursor = i.Key
		return true
	})
	if err == nil {
		err = delErr
	}
	if err != nil {
		return rep, err
	}
	if !more {
		sw.active = false
		rep.Sweeps++
	}
	return rep, nil
}
