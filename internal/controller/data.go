package controller

import (
	"fmt"
	"maps"
	"path"
	"strings"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// dataState is what nodes report about datasets (docs/datasets.md): the
// digests their caches hold, for the scheduler's preference, and the
// downloads in progress, for jobs get. In memory only: agents report both
// on every sync. Guarded by Controller.mu.
type dataState struct {
	// held maps node id to the digests its cache holds. It is replaced,
	// never changed in place, so a snapshot may share it.
	held map[string]map[string]bool
	// fetching maps replica id to its download's progress, per node.
	fetching map[string]map[string]agentapi.DataProgress
}

// observeDataLocked records a node's report; a change in what it holds
// makes the next pass run the scheduler. Callers hold c.mu.
func (c *Controller) observeDataLocked(nodeID string, req agentapi.SyncRequest) {
	d := &c.data
	old := d.held[nodeID]
	changed := len(old) != len(req.Datasets)
	for _, dg := range req.Datasets {
		if !old[dg] {
			changed = true
		}
	}
	if changed {
		held := maps.Clone(d.held)
		if held == nil {
			held = map[string]map[string]bool{}
		}
		if len(req.Datasets) == 0 {
			delete(held, nodeID)
		} else {
			set := make(map[string]bool, len(req.Datasets))
			for _, dg := range req.Datasets {
				set[dg] = true
			}
			held[nodeID] = set
		}
		d.held = held
		c.memo.forget()
	}
	if len(req.Fetching) == 0 {
		delete(d.fetching, nodeID)
		return
	}
	if d.fetching == nil {
		d.fetching = map[string]map[string]agentapi.DataProgress{}
	}
	m := make(map[string]agentapi.DataProgress, len(req.Fetching))
	for _, p := range req.Fetching {
		m[p.ReplicaID] = p
	}
	d.fetching[nodeID] = m
}

// fetchingLocked is the download progress of job j's live attempt, summed
// over its replicas; ok is false when none is fetching. Callers hold c.mu.
func (c *Controller) fetchingLocked(j *model.Job) (done, total int64, ok bool) {
	if j.State != model.JobAdmitted && j.State != model.JobRunning || j.Attempts == 0 {
		return 0, 0, false
	}
	a, found := c.st.Attempt(model.AttemptID(j.ID, j.Attempts))
	if !found {
		return 0, 0, false
	}
	for _, r := range a.Replicas {
		if p, has := c.data.fetching[r.NodeID][model.ReplicaID(a.ID, r.Rank)]; has {
			done, total, ok = done+p.Done, total+p.Total, true
		}
	}
	return done, total, ok
}

// FetchingReason is how jobs get shows a download in progress, in the
// unit of the total: "fetching data 3.2/40.0 GiB", "… 2.0/12.0 MiB".
func FetchingReason(done, total int64) string {
	unit, name := float64(1<<30), "GiB"
	switch {
	case total < 1<<20:
		unit, name = 1<<10, "KiB"
	case total < 1<<30:
		unit, name = 1<<20, "MiB"
	}
	return fmt.Sprintf("fetching data %.1f/%.1f %s", float64(done)/unit, float64(total)/unit, name)
}

// projectLocked is the declared project named name, or nil.
func (c *Controller) projectLocked(name string) *model.Project {
	for _, p := range c.fleet.projects {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// resolveData is where a dataset of a job of project is: the storage, with
// the dataset's prefix under the storage's own. An error says what to fix.
func resolveData(p *model.Project, project string, loc model.DataLocation) (model.Storage, error) {
	if loc.Storage == "" {
		return model.Storage{S3: &model.S3Storage{Bucket: loc.Bucket, Prefix: loc.Prefix}}, nil
	}
	var st model.Storage
	ok := false
	if p != nil {
		st, ok = p.Spec.Storage[loc.Storage]
	}
	if !ok {
		return st, fmt.Errorf("project %s declares no storage %q (add it under spec.storage of its Project document)", project, loc.Storage)
	}
	if st.S3 != nil {
		s3 := *st.S3
		if ref := s3.CredentialsRef; ref != "" {
			if owner, _, _ := ref.Split(); owner != project {
				return st, fmt.Errorf("storage %q of project %s names credentials of project %s: a project's storage must use its own secrets", loc.Storage, project, owner)
			}
		}
		s3.Prefix = joinPrefix(s3.Prefix, loc.Prefix)
		st.S3 = &s3
	} else {
		st.Path = path.Join(st.Path, loc.Prefix)
	}
	return st, nil
}

func joinPrefix(a, b string) string {
	return strings.Trim(path.Join(strings.Trim(a, "/"), b), "/")
}

// admitData checks that the job's storage: sources name storages its
// project declares, and that only trusted (admins') jobs read s3:// sources:
// those are read with the node's own cloud credentials, which a tenant must
// not borrow to read buckets that are not its project's.
func admitData(p *model.Project, project string, spec *model.JobSpec, trusted bool) model.FieldErrors {
	var fe model.FieldErrors
	for i, d := range spec.Data {
		loc, err := model.ParseDataSource(d.Source)
		if err != nil {
			continue // JobSpec.Validate reported it
		}
		if loc.Storage == "" && !trusted {
			fe.Add(fmt.Sprintf("spec.data[%d].source", i), fmt.Sprintf("%q is read with the node's own credentials, which only admins' jobs may use: declare a storage with sealed credentials in project %s (spec.storage.NAME) and use storage:NAME/PREFIX", d.Source, project))
			continue
		}
		if _, err := resolveData(p, project, loc); err != nil {
			fe.Add(fmt.Sprintf("spec.data[%d].source", i), err.Error())
		}
	}
	return fe
}

// dataSyncLocked is what the agent needs to fetch job's datasets: each
// resolved, with the credentials opened from its storage's credentialsRef.
// A dataset that no longer resolves carries the reason in Error, so that
// the attempt ends with it rather than waiting. Callers hold c.mu.
func (c *Controller) dataSyncLocked(job *model.Job) []agentapi.DataSync {
	if len(job.Spec.Data) == 0 {
		return nil
	}
	p := c.projectLocked(job.Project)
	out := make([]agentapi.DataSync, 0, len(job.Spec.Data))
	for i, d := range job.Spec.Data {
		ds := agentapi.DataSync{Field: fmt.Sprintf("spec.data[%d]", i), Source: d.Source, Path: model.CleanDataPath(d.Path)}
		loc, err := model.ParseDataSource(d.Source)
		if err == nil {
			ds.Digest = model.DataDigest(job.Project, loc)
			ds.Storage, err = resolveData(p, job.Project, loc)
		}
		if err == nil && ds.Storage.S3 != nil && ds.Storage.S3.CredentialsRef != "" {
			ref := ds.Storage.S3.CredentialsRef
			project, name, _ := ref.Split()
			var v string
			if v, err = c.openSecretLocked(project, name); err == nil {
				id, secret, ok := strings.Cut(strings.TrimSpace(v), ":")
				if !ok || id == "" || secret == "" {
					err = fmt.Errorf("secret %s must be ACCESS_KEY_ID:SECRET_ACCESS_KEY", ref)
				}
				ds.AccessKeyID, ds.SecretAccessKey = id, secret
			} else {
				err = fmt.Errorf("credentials %s: %w", ref, err)
			}
		}
		if err != nil {
			ds.Error = fmt.Sprintf("%s.source %s: %v", ds.Field, d.Source, err)
			ds.AccessKeyID, ds.SecretAccessKey = "", ""
		}
		out = append(out, ds)
	}
	return out
}

// heldDataLocked is the nodes' reported datasets, for the scheduler's
// snapshot (shared: it is replaced, never changed). Callers hold c.mu.
func (c *Controller) heldDataLocked() map[string]map[string]bool { return c.data.held }
