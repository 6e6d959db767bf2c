package artifacts

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/objstore"
)

// Ref names one artefact (model.ArtifactRef).
type Ref = model.ArtifactRef

// found is a resolved artefact: its manifest and where it lies.
type found struct {
	pl     place
	prefix string // the folder of its objects
	key    string // its manifest's key
	m      ckptsync.Manifest
	latest bool
}

// entry is a manifest read while listing.
type entry struct {
	key    string
	m      ckptsync.Manifest
	latest bool
}

// checkJob fails with model.ErrNotFound unless job is project's.
func (c *Catalog) checkJob(project, job string) error {
	if p, ok := c.cfg.Fleet.JobProject(job); !ok || p != project {
		return fmt.Errorf("no job %s in project %s: %w", job, project, model.ErrNotFound)
	}
	return nil
}

// List returns project's artefacts that f selects: checkpoints newest
// first per job, then pushed artefacts newest first per name.
func (c *Catalog) List(ctx context.Context, project string, f model.ArtifactFilter) ([]model.Artifact, error) {
	if f.Job != "" {
		if err := c.checkJob(project, f.Job); err != nil {
			return nil, err
		}
	}
	places, err := c.places(ctx, project)
	if err != nil {
		return nil, err
	}
	out := []model.Artifact{}
	for _, pl := range places {
		if f.Kind != model.ArtifactModel && f.Name == "" {
			var jobs map[string]string
			if f.Job != "" {
				jobs = map[string]string{ckptsync.JobPrefix(pl.seal, f.Job): f.Job}
			} else if jobs, err = c.jobsWithFolders(ctx, project, pl); err != nil {
				return nil, err
			}
			for prefix, job := range jobs {
				es, err := c.checkpoints(ctx, pl, prefix)
				if err != nil {
					return nil, corrupt(err)
				}
				for _, e := range es {
					a := view(project, model.ArtifactCheckpoint, pl.desc, e.m, false)
					a.Job, a.Latest, a.Version = job, e.latest, shortName(e.key)
					out = append(out, a)
				}
			}
		}
		if f.Kind != model.ArtifactCheckpoint {
			sets, err := c.sets(ctx, pl)
			if err != nil {
				return nil, corrupt(err)
			}
			for _, es := range sets {
				for _, e := range es {
					if (f.Name != "" && e.m.Name != f.Name) || (f.Job != "" && e.m.JobID != f.Job) {
						continue
					}
					a := view(project, model.ArtifactModel, pl.desc, e.m, false)
					a.Latest = e.latest
					out = append(out, a)
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b model.Artifact) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Job, b.Job), cmp.Compare(a.Name, b.Name),
			cmp.Compare(b.Step, a.Step), b.Uploaded.Compare(a.Uploaded), cmp.Compare(b.Version, a.Version))
	})
	return out, nil
}

// jobsWithFolders maps the folder prefix of each of project's jobs that
// has one in pl to its id, listing the storage once.
func (c *Catalog) jobsWithFolders(ctx context.Context, project string, pl place) (map[string]string, error) {
	all := c.projectJobs(project, pl.seal)
	out := map[string]string{}
	err := pl.store.List(ctx, "", func(i objstore.Info) bool {
		if dir, _, ok := strings.Cut(i.Key, "/"); ok {
			if job, mine := all[dir+"/"]; mine {
				out[dir+"/"] = job
			}
		}
		return true
	})
	return out, err
}

func shortName(key string) string {
	n := key[strings.LastIndexByte(key, '/')+1:]
	if len(n) > 12 {
		n = n[:12]
	}
	return n
}

// checkpoints reads the manifests of the job folder prefix, marking the
// latest. A job folder with no manifests has none (no error).
func (c *Catalog) checkpoints(ctx context.Context, pl place, prefix string) ([]entry, error) {
	var keys []string
	if err := pl.store.List(ctx, prefix+"m/", func(i objstore.Info) bool { keys = append(keys, i.Key); return true }); err != nil {
		return nil, err
	}
	latest := ""
	if data, err := ckptsync.ReadManifestBytes(ctx, pl.store, pl.seal, ckptsync.LatestKey(prefix)); err == nil {
		latest = ckptsync.HistoryKey(prefix, pl.seal, data)
	} else if !errors.Is(err, objstore.ErrNotFound) {
		return nil, err
	}
	out := make([]entry, 0, len(keys))
	for _, k := range keys {
		m, err := ckptsync.ReadManifest(ctx, pl.store, pl.seal, k)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, entry{key: k, m: m, latest: k == latest})
	}
	return out, nil
}

// sets reads every pushed artefact's versions in pl, by set id; the newest
// version of each is marked latest.
func (c *Catalog) sets(ctx context.Context, pl place) (map[string][]entry, error) {
	return c.readSets(ctx, pl, indexPrefix(pl.seal))
}

// set reads the versions of one pushed artefact (listing only its own
// folder of the index), newest first.
func (c *Catalog) set(ctx context.Context, pl place, set string) ([]entry, error) {
	out, err := c.readSets(ctx, pl, indexPrefix(pl.seal)+set+"/")
	return out[set], err
}

func (c *Catalog) readSets(ctx context.Context, pl place, under string) (map[string][]entry, error) {
	idx := indexPrefix(pl.seal)
	out := map[string][]entry{}
	var keys []string
	if err := pl.store.List(ctx, under, func(i objstore.Info) bool { keys = append(keys, i.Key); return true }); err != nil {
		return nil, err
	}
	for _, k := range keys {
		set, ver, ok := strings.Cut(strings.TrimPrefix(k, idx), "/")
		if !ok {
			continue
		}
		if ver == setMarker {
			if out[set] == nil {
				out[set] = []entry{}
			}
			continue
		}
		m, err := ckptsync.ReadManifest(ctx, pl.store, pl.seal, k)
		if errors.Is(err, objstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[set] = append(out[set], entry{key: k, m: m})
	}
	for set, es := range out {
		slices.SortFunc(es, func(a, b entry) int { return cmp.Compare(b.m.Release, a.m.Release) })
		if len(es) > 0 {
			es[0].latest = true
		}
		out[set] = es
	}
	return out, nil
}

// resolve finds the artefact r names in project.
func (c *Catalog) resolve(ctx context.Context, project string, r Ref) (found, error) {
	if (r.Job == "") == (r.Name == "") {
		return found{}, errors.New("name a job's checkpoint or a pushed artefact")
	}
	if r.Job != "" {
		if err := c.checkJob(project, r.Job); err != nil {
			return found{}, err
		}
	}
	places, err := c.places(ctx, project)
	if err != nil {
		return found{}, err
	}
	for _, pl := range places {
		var es []entry
		var prefix string
		if r.Job != "" {
			prefix = ckptsync.JobPrefix(pl.seal, r.Job)
			if es, err = c.checkpoints(ctx, pl, prefix); err != nil {
				return found{}, corrupt(err)
			}
		} else {
			set := setID(pl.seal, r.Name)
			prefix = set + "/"
			if es, err = c.set(ctx, pl, set); err != nil {
				return found{}, corrupt(err)
			}
		}
		if e, ok := pick(es, r); ok {
			return found{pl: pl, prefix: prefix, key: e.key, m: e.m, latest: e.latest}, nil
		}
	}
	return found{}, fmt.Errorf("%s in project %s: %w", r, project, model.ErrNotFound)
}

// pick chooses r's entry among es.
func pick(es []entry, r Ref) (entry, bool) {
	v := r.Version
	var best *entry
	for i := range es {
		e := &es[i]
		var ok bool
		switch {
		case v == "" || v == "latest":
			ok = e.latest
		case r.Job != "":
			step, err := strconv.ParseInt(v, 10, 64)
			ok = err == nil && e.m.Step == step
		case strings.HasPrefix(v, "@"):
			ok = slices.Contains(e.m.Tags, v[1:])
		default:
			ok = e.m.Release == v
		}
		if ok && (best == nil || e.m.Uploaded.After(best.m.Uploaded) || e.m.Release > best.m.Release) {
			best = e
		}
	}
	if best == nil {
		return entry{}, false
	}
	return *best, true
}

// Get returns the artefact r names, with its files.
func (c *Catalog) Get(ctx context.Context, project string, r Ref) (model.Artifact, error) {
	f, err := c.resolve(ctx, project, r)
	if err != nil {
		return model.Artifact{}, err
	}
	return f.view(project, r), nil
}

func (f found) view(project string, r Ref) model.Artifact {
	kind := model.ArtifactModel
	if r.Job != "" {
		kind = model.ArtifactCheckpoint
	}
	a := view(project, kind, f.pl.desc, f.m, true)
	a.Latest = f.latest
	if r.Job != "" {
		a.Job, a.Version = r.Job, shortName(f.key)
	}
	return a
}

// Open returns the artefact r names and a reader of its file path. The
// reader verifies as it reads (ckptsync.OpenFile): a read that ends
// without error returned exactly the file's bytes; a corrupt object fails
// with model.ErrCorrupt naming it.
func (c *Catalog) Open(ctx context.Context, project string, r Ref, path string) (model.Artifact, model.ArtifactFile, io.ReadCloser, error) {
	f, err := c.resolve(ctx, project, r)
	if err != nil {
		return model.Artifact{}, model.ArtifactFile{}, nil, err
	}
	for _, file := range f.m.Files {
		if file.Path != path {
			continue
		}
		rc, err := ckptsync.OpenFile(ctx, f.pl.store, f.pl.seal, f.prefix, file)
		if err != nil {
			return model.Artifact{}, model.ArtifactFile{}, nil, fmt.Errorf("%s, file %s: %w", r, path, corrupt(err))
		}
		a := f.view(project, r)
		a.Files = nil
		return a, model.ArtifactFile{Path: file.Path, Size: file.Size, SHA256: file.SHA256, Mode: file.Mode}, &marked{rc}, nil
	}
	return model.Artifact{}, model.ArtifactFile{}, nil, fmt.Errorf("%s has no file %s: %w", r, path, model.ErrNotFound)
}

// marked marks verification failures with model.ErrCorrupt.
type marked struct{ io.ReadCloser }

func (m *marked) Read(p []byte) (int, error) {
	n, err := m.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = corrupt(err)
	}
	return n, err
}
