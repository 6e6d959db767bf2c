package artifacts

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Report counts what a retention round did.
type Report struct {
	// Manifests: checkpoints and versions removed by retention.
	Manifests int
	// Objects: unreferenced objects collected, and their stored bytes.
	Objects int
	Bytes   int64
	// Skipped: folders left alone because a manifest did not open.
	Skipped int
	// Read: folders whose manifests were read again (changed or new).
	Read int
	// Swept: keys garbage collection's walk looked at this round;
	// Sweeps: walks that reached the end of a storage.
	Swept, Sweeps int
}

func (r *Report) add(o Report) {
	r.Manifests += o.Manifests
	r.Objects += o.Objects
	r.Bytes += o.Bytes
	r.Skipped += o.Skipped
	r.Read += o.Read
	r.Swept += o.Swept
	r.Sweeps += o.Sweeps
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
			c.cfg.Log.Info("artefact retention", "manifests_removed", rep.Manifests, "objects_removed", rep.Objects, "bytes_removed", rep.Bytes,
				"folders_skipped", rep.Skipped, "folders_read", rep.Read, "keys_swept", rep.Swept)
		}
	}
}

// Retain runs one round: every project's retention from its records
// (reading again only the folders that changed), the collection of
// objects retention left unnamed once their grace has passed, and a
// bounded step of each storage's garbage-collection walk. A project's
// failure does not stop the others; the errors are joined.
func (c *Catalog) Retain(ctx context.Context) (Report, error) {
	c.rounds.Lock() // one round at a time: the walks' cursors are shared
	defer c.rounds.Unlock()
	projects := map[string]bool{}
	for _, p := range c.cfg.Fleet.Projects() {
		projects[p.Name] = true
	}
	for _, j := range c.cfg.Fleet.Jobs(model.JobFilter{Limit: 1 << 30}) {
		projects[j.Project] = true
	}
	now := c.cfg.Clock.Now()
	rd := &round{now: now, cutoff: now.Add(-c.cfg.Grace), folders: map[string]map[string]*listed{}}
	type storage struct {
		pl     place
		recs   map[string]*records
		places map[string]place
	}
	stores := map[string]*storage{}
	var total Report
	var errs []error
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range projects {
			if !yield(p) {
				return
			}
		}
	}) {
		places, rep, err := c.retainProject(ctx, rd, p)
		total.add(rep)
		if err != nil {
			errs = append(errs, fmt.Errorf("project %s: %w", p, err))
		}
		for _, pl := range places {
			s := stores[pl.id]
			if s == nil {
				s = &storage{pl: pl, recs: map[string]*records{}, places: map[string]place{}}
				stores[pl.id] = s
			}
			if r := c.record(p, pl); r.ready {
				s.recs[p], s.places[p] = r, pl
			}
		}
	}
	for _, s := range stores {
		rep, err := c.sweepStore(ctx, rd, s.pl, s.recs, s.places)
		total.add(rep)
		if err != nil {
			errs = append(errs, fmt.Errorf("collecting in storage %s: %w", s.pl.desc, err))
		}
	}
	return total, errors.Join(errs...)
}

// retainProject brings project's records up to date and applies its
// retention in each storage; it returns the places it went through.
func (c *Catalog) retainProject(ctx context.Context, rd *round, project string) ([]place, Report, error) {
	l := c.projectLock(project)
	l.Lock()
	defer l.Unlock()
	pol := c.policy(project)
	places, err := c.places(ctx, project)
	if err != nil {
		return nil, Report{}, err
	}
	var total Report
	var errs []error
	for _, pl := range places {
		rep, err := c.refresh(ctx, rd, project, pl, c.record(project, pl), pol)
		total.add(rep)
		if err != nil {
			errs = append(errs, fmt.Errorf("storage %s: %w", pl.desc, err))
		}
	}
	return places, total, errors.Join(errs...)
}
