package artifacts

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/objstore"
)

// Report counts what a retention round removed.
type Report struct {
	// Manifests: checkpoints and versions removed by retention.
	Manifests int
	// Objects: unreferenced objects collected, and their stored bytes.
	Objects int
	Bytes   int64
	// Skipped: folders left alone because a manifest did not open.
	Skipped int
}

func (r *Report) add(o Report) {
	r.Manifests += o.Manifests
	r.Objects += o.Objects
	r.Bytes += o.Bytes
	r.Skipped += o.Skipped
}

// Run applies retention every Interval until ctx ends. The server runs it
// on the leader only.
func (c *Catalog) Run(ctx context.Context) error {
	t := c.cfg.Clock.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		rep, err := c.Retain(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			c.cfg.Log.Warn("artefact retention", "err", err)
		case rep.Manifests+rep.Objects+rep.Skipped > 0:
			c.cfg.Log.Info("artefact retention", "manifests_removed", rep.Manifests, "objects_removed", rep.Objects, "bytes_removed", rep.Bytes, "folders_skipped", rep.Skipped)
		}
	}
}

// Retain applies every project's retention and collects unreferenced
// objects, in every storage. A project's failure does not stop the others;
// the errors are joined.
func (c *Catalog) Retain(ctx context.Context) (Report, error) {
	projects := map[string]bool{}
	for _, p := range c.cfg.Fleet.Projects() {
		projects[p.Name] = true
	}
	for _, j := range c.cfg.Fleet.Jobs(model.JobFilter{Limit: math.MaxInt32}) {
		projects[j.Project] = true
	}
	var total Report
	var errs []error
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range projects {
			if !yield(p) {
				return
			}
		}
	}) {
		rep, err := c.RetainProject(ctx, p)
		total.add(rep)
		if err != nil {
			errs = append(errs, fmt.Errorf("project %s: %w", p, err))
		}
	}
	return total, errors.Join(errs...)
}

// RetainProject applies project's retention and collects its unreferenced
// objects.
func (c *Catalog) RetainProject(ctx context.Context, project string) (Report, error) {
	l := c.projectLock(project)
	l.Lock()
	defer l.Unlock()
	pol := c.policy(project)
	places, err := c.places(ctx, project)
	if err != nil {
		return Report{}, err
	}
	var total Report
	var errs []error
	for _, pl := range places {
		rep, err := c.retainPlace(ctx, pl, project, pol)
		total.add(rep)
		if err != nil {
			errs = append(errs, fmt.Errorf("storage %s: %w", pl.desc, err))
		}
	}
	return total, errors.Join(errs...)
}

func (c *Catalog) retainPlace(ctx context.Context, pl place, project string, pol *model.ArtifactPolicy) (Report, error) {
	// Objects are listed before manifests are read: an object stored
	// after this listing is not considered, and one listed but named by
	// a manifest written since is younger than Grace.
	cutoff := c.cfg.Clock.Now().Add(-c.cfg.Grace)
	objects := map[string][]objstore.Info{} // by folder prefix
	folders := map[string]bool{}
	err := pl.store.List(ctx, "", func(i objstore.Info) bool {
		if dir, _, ok := strings.Cut(i.Key, "/"); ok {
			folders[dir+"/"] = true
		}
		if dir, name, ok := strings.Cut(i.Key, "/o/"); ok && !strings.Contains(name, "/") {
			objects[dir+"/"] = append(objects[dir+"/"], i)
		}
		return true
	})
	if err != nil {
		return Report{}, err
	}
	var total Report
	var errs []error
	keepCk, keepVer := 0, 0
	if pol != nil {
		keepCk, keepVer = pol.KeepCheckpoints, pol.KeepVersions
	}
	for prefix, job := range c.projectJobs(project, pl.seal) {
		if !folders[prefix] {
			continue // nothing stored for this job here
		}
		es, err := c.checkpoints(ctx, pl, prefix)
		if err != nil {
			total.Skipped++
			c.cfg.Log.Warn("artefact retention: leaving a job's checkpoints alone", "job_id", job, "err", err)
			continue
		}
		rep, err := c.retainSeries(ctx, pl, prefix, es, objects[prefix], cutoff, func(es []entry) []entry {
			if keepCk <= 0 {
				return nil
			}
			slices.SortFunc(es, func(a, b entry) int {
				return cmp.Or(cmp.Compare(b.m.Step, a.m.Step), b.m.Uploaded.Compare(a.m.Uploaded))
			})
			var drop []entry
			kept := 0
			for _, e := range es { // newest first; the latest always stays
				if e.latest || kept < keepCk {
					kept++
					continue
				}
				drop = append(drop, e)
			}
			return drop
		}, true)
		total.add(rep)
		if err != nil {
			errs = append(errs, fmt.Errorf("job %s: %w", job, err))
		}
	}
	sets, err := c.sets(ctx, pl)
	if err != nil {
		total.Skipped++
		return total, errors.Join(append(errs, fmt.Errorf("reading pushed artefacts: %w", err))...)
	}
	for set, es := range sets {
		prefix := set + "/"
		rep, err := c.retainSeries(ctx, pl, prefix, es, objects[prefix], cutoff, func(es []entry) []entry {
			if keepVer <= 0 {
				return nil
			}
			var drop []entry
			kept := 0
			for _, e := range es { // newest first
				switch {
				case pol.Kept(e.m.Tags):
				case kept < keepVer:
					kept++
				default:
					drop = append(drop, e)
				}
			}
			return drop
		}, false)
		total.add(rep)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return total, errors.Join(errs...)
}

// retainSeries removes the manifests drop chooses among es (the folder
// prefix's), then the folder's objects that no remaining manifest names
// and that are older than cutoff. For a job folder (job), the latest
// checkpoint's objects count as named too.
func (c *Catalog) retainSeries(ctx context.Context, pl place, prefix string, es []entry, objects []objstore.Info, cutoff time.Time,
	drop func([]entry) []entry, job bool) (Report, error) {
	var rep Report
	dropped := map[string]bool{}
	for _, e := range drop(slices.Clone(es)) {
		if err := pl.store.Delete(ctx, e.key); err != nil {
			return rep, err
		}
		dropped[e.key] = true
		rep.Manifests++
	}
	named := map[string]bool{}
	for _, e := range es {
		if dropped[e.key] {
			continue
		}
		for _, f := range e.m.Files {
			named[f.Object] = true
		}
	}
	if job {
		m, err := ckptsync.ReadManifest(ctx, pl.store, pl.seal, ckptsync.LatestKey(prefix))
		switch {
		case err == nil:
			for _, f := range m.Files {
				named[f.Object] = true
			}
		case !errors.Is(err, objstore.ErrNotFound):
			rep.Skipped++
			return rep, nil
		}
	}
	for _, o := range objects {
		name := strings.TrimPrefix(o.Key, prefix+"o/")
		if named[name] || !o.Modified.Before(cutoff) {
			continue
		}
		if err := pl.store.Delete(ctx, o.Key); err != nil {
			return rep, err
		}
		rep.Objects++
		rep.Bytes += o.Size
	}
	return rep, nil
}
