package artifacts

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/objstore"
)

// settle is how long a job's folder is still watched for a final upload
// after its attempt stopped running.
const settle = time.Hour

// records is what the catalogue knows of one project's folders in one
// storage, read from the manifests gpufleet wrote: which checkpoints and
// versions exist and which objects each names. A retention round reads
// again only the folders that changed (or may have) since the last one;
// the records live in memory and are rebuilt with one listing after a
// restart or a change of leader. Guarded by the project's lock.
type records struct {
	ready  bool
	policy string             // the policy the folders were last judged under
	jobs   map[string]*folder // by job id
	sets   map[string]*folder // by set id
	// pending are objects no manifest names any more, by key, waiting for
	// their grace to pass.
	pending map[string]*pend
}

// folder is one job's checkpoints or one pushed artefact's versions.
type folder struct {
	prefix string // "<job folder>/" or "<set>/": objects are prefix+"o/"
	job    string // the job's id; "" for a pushed artefact
	set    string // the set id; "" for a job
	dirty  bool   // read it again before judging or collecting in it
	judge  bool   // apply retention at the next round
	bad    bool   // a manifest did not open: judge and collect nothing
	open   bool   // the job may still upload (running, or lately): look at latest each round
	ended  time.Time
	// latestTag is the ETag of the job's latest at the last read;
	// latestKey the history manifest it copies; latest its objects.
	latestTag, latestKey string
	latest               []string
	ms                   map[string]*known // by manifest key
	// pre is what the first round's listing of the whole storage showed
	// of the folder, read instead of listing it again (nil: list it). Only
	// folders the records did not hold yet get it: one this server changed
	// may have changed after the listing.
	pre *listed
}

// listed is one folder as a listing showed it.
type listed struct {
	manifests []string // keys
	latestTag string   // "" when latest was not there
}

// known is what a manifest says that retention needs.
type known struct {
	step     int64
	uploaded time.Time
	release  string
	tags     []string
	objects  []string
}

// pend is an object waiting for its grace.
type pend struct {
	f   *folder
	due time.Time // zero: look now
}

func knownOf(m ckptsync.Manifest) *known {
	k := &known{step: m.Step, uploaded: m.Uploaded, release: m.Release, tags: m.Tags}
	for _, f := range m.Files {
		k.objects = append(k.objects, f.Object)
	}
	return k
}

// named reports the objects some manifest of f (or its latest) names.
func (f *folder) named() map[string]bool {
	out := map[string]bool{}
	for _, k := range f.ms {
		for _, o := range k.objects {
			out[o] = true
		}
	}
	for _, o := range f.latest {
		out[o] = true
	}
	return out
}

func recKey(project string, pl place) string { return project + "\x00" + pl.id }

// record returns project's records in pl, creating empty ones.
func (c *Catalog) record(project string, pl place) *records {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.recs[recKey(project, pl)]
	if r == nil {
		r = &records{jobs: map[string]*folder{}, sets: map[string]*folder{}, pending: map[string]*pend{}}
		c.recs[recKey(project, pl)] = r
	}
	return r
}

// touchSet and touchJob mark a folder changed by this server (a commit or
// a delete), so the next round reads it again. The caller holds the
// project's lock. Before the project's first round they create its
// records (not ready) with the folder in them: that round then lists the
// folder afresh instead of judging it from the storage's shared listing,
// which another project's round may have taken before this change.
func (c *Catalog) touchSet(project string, pl place, set string) {
	r := c.record(project, pl)
	f := r.sets[set]
	if f == nil {
		f = &folder{prefix: set + "/", set: set, ms: map[string]*known{}}
		r.sets[set] = f
	}
	f.dirty = true
}

func (c *Catalog) touchJob(project string, pl place, job string) {
	r := c.record(project, pl)
	f := r.jobs[job]
	if f == nil {
		f = &folder{prefix: ckptsync.JobPrefix(pl.seal, job), job: job, open: true, ms: map[string]*known{}}
		r.jobs[job] = f
	}
	f.dirty = true
}

// round is what one retention round shares across projects: each
// storage's folders, listed once when some project's records are first
// built.
type round struct {
	now     time.Time
	cutoff  time.Time
	folders map[string]map[string]*listed // by storage id, then folder prefix
}

// folders lists the storage pl once per round: every top-level folder,
// with its history manifests and latest's ETag (a job's folder layout; a
// project's index holds its sets' versions under <index>/<set>/).
func (c *Catalog) folders(ctx context.Context, rd *round, pl place) (map[string]*listed, error) {
	if f := rd.folders[pl.id]; f != nil {
		return f, nil
	}
	f := map[string]*listed{}
	at := func(dir string) *listed {
		l := f[dir]
		if l == nil {
			l = &listed{}
			f[dir] = l
		}
		return l
	}
	err := pl.store.List(ctx, "", func(i objstore.Info) bool {
		dir, rest, ok := strings.Cut(i.Key, "/")
		if !ok {
			return true
		}
		l := at(dir + "/")
		switch {
		case rest == "latest":
			l.latestTag = i.ETag
		case strings.HasPrefix(rest, "m/"):
			l.manifests = append(l.manifests, i.Key)
		default:
			if set, ver, ok := strings.Cut(rest, "/"); ok && !strings.HasPrefix(rest, "o/") {
				s := at(dir + "/" + set + "/") // an index's set (its marker: it exists)
				if ver != setMarker {
					s.manifests = append(s.manifests, i.Key)
				}
			}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	rd.folders[pl.id] = f
	return f, nil
}

func policyKey(pol *model.ArtifactPolicy) string {
	if pol == nil {
		return ""
	}
	b, _ := json.Marshal(pol)
	return string(b)
}

// refresh brings project's records in pl up to date, touching only what
// changed: running (or lately ended) jobs' latest (one HEAD each), and
// folders found or marked changed (one LIST of their manifests, a GET of
// each manifest not yet known).
func (c *Catalog) refresh(ctx context.Context, rd *round, project string, pl place, r *records, pol *model.ArtifactPolicy) (Report, error) {
	var rep Report
	boot := !r.ready
	var dirs map[string]*listed
	if boot {
		var err error
		if dirs, err = c.folders(ctx, rd, pl); err != nil {
			return rep, err
		}
		// A folder already in the records was changed through this server
		// since they were created: it is listed afresh, not from dirs.
		idx := indexPrefix(pl.seal)
		for dir, l := range dirs {
			if set, ok := strings.CutPrefix(dir, idx); ok && set != "" && r.sets[set[:len(set)-1]] == nil {
				set = set[:len(set)-1]
				r.sets[set] = &folder{prefix: set + "/", set: set, dirty: true, ms: map[string]*known{}, pre: l}
			}
		}
	}
	if pk := policyKey(pol); pk != r.policy {
		r.policy = pk
		for _, f := range r.jobs {
			f.judge = true
		}
		for _, f := range r.sets {
			f.judge = true
		}
	}
	for _, j := range c.cfg.Fleet.Jobs(model.JobFilter{Project: project, Limit: 1 << 30}) {
		f := r.jobs[j.ID]
		if f == nil {
			f = &folder{prefix: ckptsync.JobPrefix(pl.seal, j.ID), job: j.ID, open: true, ms: map[string]*known{}}
			if boot {
				f.pre = dirs[f.prefix]
				f.dirty, f.open = f.pre != nil, j.State == model.JobRunning
			}
			r.jobs[j.ID] = f
		}
		if f.open && !f.dirty {
			st, err := pl.store.Stat(ctx, ckptsync.LatestKey(f.prefix))
			switch {
			case err == nil:
				f.dirty = st.ETag != f.latestTag
			case errors.Is(err, objstore.ErrNotFound):
				f.dirty = f.latestTag != ""
			default:
				return rep, err
			}
		}
		// Only a running attempt uploads (the last upload comes before its
		// end is reported); an hour's settle covers a late one.
		switch {
		case j.State == model.JobRunning:
			f.open, f.ended = true, time.Time{}
		case f.ended.IsZero():
			f.ended = rd.now
		case rd.now.Sub(f.ended) >= settle:
			f.open = false
		}
	}
	var errs []error
	read := func(f *folder) {
		if !f.dirty {
			return
		}
		if err := c.read(ctx, pl, f); err != nil {
			f.bad = true
			rep.Skipped++
			what := "pushed artefact " + f.set
			if f.job != "" {
				what = "job " + f.job
			}
			c.cfg.Log.Warn("artefact retention: leaving a folder alone", "project", project, "folder", what, "err", err)
			return
		}
		rep.Read++
		f.dirty, f.bad, f.judge = false, false, true
	}
	for _, f := range r.jobs {
		read(f)
	}
	for _, f := range r.sets {
		read(f)
	}
	r.ready = true
	keepCk, keepVer := 0, 0
	if pol != nil {
		keepCk, keepVer = pol.KeepCheckpoints, pol.KeepVersions
	}
	for _, f := range r.jobs {
		if f.judge && !f.bad {
			n, err := c.judge(ctx, pl, r, f, keepCk, pol)
			rep.Manifests += n
			if err != nil {
				errs = append(errs, fmt.Errorf("job %s: %w", f.job, err))
			}
		}
	}
	for _, f := range r.sets {
		if f.judge && !f.bad {
			n, err := c.judge(ctx, pl, r, f, keepVer, pol)
			rep.Manifests += n
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	col, err := c.collectPending(ctx, rd, pl, r)
	rep.add(col)
	if err != nil {
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

// read reads f's manifests again: the job's latest, then the listing of
// its manifests (or what the first round's listing showed), fetching only
// those not already known.
func (c *Catalog) read(ctx context.Context, pl place, f *folder) error {
	pre := f.pre
	f.pre = nil
	list := indexPrefix(pl.seal) + f.set + "/"
	if f.job != "" {
		list = f.prefix + "m/"
		lk := ckptsync.LatestKey(f.prefix)
		var st objstore.Info
		var err error
		if pre != nil {
			st.ETag = pre.latestTag
			if st.ETag == "" {
				err = objstore.ErrNotFound
			}
		} else {
			st, err = pl.store.Stat(ctx, lk)
		}
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			f.latestTag, f.latestKey, f.latest = "", "", nil
		case err != nil:
			return err
		default:
			data, err := ckptsync.ReadManifestBytes(ctx, pl.store, pl.seal, lk)
			if err != nil {
				return err
			}
			var m ckptsync.Manifest
			if err := json.Unmarshal(data, &m); err != nil {
				return fmt.Errorf("%s: %w", lk, err)
			}
			f.latestTag, f.latestKey, f.latest = st.ETag, ckptsync.HistoryKey(f.prefix, pl.seal, data), knownOf(m).objects
		}
	}
	seen := map[string]bool{}
	var fresh []string
	add := func(key string) {
		seen[key] = true
		if f.ms[key] == nil {
			fresh = append(fresh, key)
		}
	}
	if pre != nil {
		for _, k := range pre.manifests {
			add(k)
		}
	} else if err := pl.store.List(ctx, list, func(i objstore.Info) bool {
		if f.set == "" || !strings.HasSuffix(i.Key, "/"+setMarker) {
			add(i.Key)
		}
		return true
	}); err != nil {
		return err
	}
	for k := range f.ms {
		if !seen[k] {
			delete(f.ms, k)
		}
	}
	for _, k := range fresh {
		m, err := ckptsync.ReadManifest(ctx, pl.store, pl.seal, k)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return err
		}
		f.ms[k] = knownOf(m)
	}
	return nil
}

// judge applies retention to f from its records: it removes the
// manifests beyond what the policy keeps and queues the objects no
// remaining manifest names. It returns how many manifests it removed.
func (c *Catalog) judge(ctx context.Context, pl place, r *records, f *folder, keep int, pol *model.ArtifactPolicy) (int, error) {
	f.judge = false
	if keep <= 0 {
		return 0, nil
	}
	keys := make([]string, 0, len(f.ms))
	for k := range f.ms {
		keys = append(keys, k)
	}
	var drop []string
	kept := 0
	if f.job != "" {
		slices.SortFunc(keys, func(a, b string) int {
			x, y := f.ms[a], f.ms[b]
			return cmp.Or(cmp.Compare(y.step, x.step), y.uploaded.Compare(x.uploaded), strings.Compare(a, b))
		})
		for _, k := range keys { // newest first; the latest always stays
			if k == f.latestKey || kept < keep {
				kept++
				continue
			}
			drop = append(drop, k)
		}
	} else {
		slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(f.ms[b].release, f.ms[a].release) })
		for _, k := range keys { // newest first
			switch {
			case pol.Kept(f.ms[k].tags):
			case kept < keep:
				kept++
			default:
				drop = append(drop, k)
			}
		}
	}
	n := 0
	var gone []string
	for _, k := range drop {
		if err := pl.store.Delete(ctx, k); err != nil {
			return n, err
		}
		gone = append(gone, f.ms[k].objects...)
		delete(f.ms, k)
		n++
	}
	named := f.named()
	for _, o := range gone {
		if !named[o] {
			r.pending[ckptsync.ObjectKey(f.prefix, o)] = &pend{f: f}
		}
	}
	return n, nil
}
