package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/datacache"
	"github.com/gpufleet/gpufleet/internal/objstore"
)

// Datasets (docs/datasets.md): a replica whose spec carries Data has each
// dataset listed in its storage, fetched into the node's data cache (or
// found there) before it starts, and shown to it read-only at its path:
// a symbolic link into the cache for a process, a read-only bind mount for
// a container. The cache entries stay pinned until the replica is
// released.

// DataConfig configures the node's data cache.
type DataConfig struct {
	// CacheDir is the cache's folder (default <work root>/datacache). It
	// must be a folder workload users can pass through: entries are read
	// through it.
	CacheDir string
	// CacheBytes caps the cache (default datacache.DefaultMaxBytes).
	CacheBytes int64
}

// fetchReportEvery is how often a sync carries download progress.
const fetchReportEvery = 2 * time.Second

// openCache opens the node's data cache, once, at Run.
func (a *Agent) openCache() error {
	dir := a.cfg.Data.CacheDir
	if dir == "" {
		dir = filepath.Join(a.cfg.Isolation.WorkRoot, "datacache")
	}
	if err := mkdirPassable(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("creating the data cache's parent: %w", err)
	}
	c, err := datacache.Open(datacache.Config{Root: dir, MaxBytes: a.cfg.Data.CacheBytes})
	if err != nil {
		return err
	}
	a.cache = c
	return nil
}

// fetchData fetches spec's datasets into the cache and shows them to the
// sandbox's workload; on success the entries are pinned for the replica
// (released by releaseData). Errors name the dataset's field and source,
// and the object where one is at fault.
func (a *Agent) fetchData(ctx context.Context, spec agentapi.ReplicaSpec, sb *runtime.Sandbox, stopped func() bool, log *slog.Logger) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // a stop asked for meanwhile cuts the download short
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if stopped() {
					cancel()
					return
				}
			}
		}
	}()
	type listed struct {
		ds datacache.Dataset
		in agentapi.DataSync
	}
	var all []listed
	var total int64
	for _, d := range spec.Data {
		ds, err := datacache.OpenDataset(ctx, spec.Project, d)
		if err != nil {
			return err
		}
		total += ds.Size()
		all = append(all, listed{ds: ds, in: d})
	}
	var handles []*datacache.Handle
	defer func() {
		if err != nil {
			for _, h := range handles {
				h.Release()
			}
		}
		a.setFetching(spec.ID, nil)
	}()
	var before int64
	a.setFetching(spec.ID, &agentapi.DataProgress{ReplicaID: spec.ID, Total: total})
	for _, l := range all {
		start := time.Now()
		h, err := a.cache.Acquire(ctx, l.ds, func(done, _ int64) {
			a.setFetching(spec.ID, &agentapi.DataProgress{ReplicaID: spec.ID, Done: before + done, Total: total})
		})
		if err != nil {
			return err
		}
		handles = append(handles, h)
		before += l.ds.Size()
		log.Info("dataset ready", "source", l.in.Source, "path", l.in.Path, "cache_hit", h.Hit, "objects", len(l.ds.Objects), "took", time.Since(start).Round(time.Millisecond))
		m, err := a.showData(*sb, l.in, h)
		if err != nil {
			return fmt.Errorf("%s.path %s: %w", l.in.Field, l.in.Path, err)
		}
		sb.Data = append(sb.Data, m)
	}
	a.mu.Lock()
	a.dataHeld[spec.ID] = handles
	a.mu.Unlock()
	ring(a.changed) // the server hears of the new entries with the next sync
	return nil
}

// dataRoot is the folder spec.data paths are relative to, as the job sees
// it (GPUFLEET_DATA_DIR): its working directory, except for a process
// started in a host folder (an absolute workdir, admins only), which gets
// its own work tree instead: the agent never writes into a host folder.
func dataRoot(sb runtime.Sandbox) string {
	if sb.Runtime == runtime.Container || sb.Workdir == sb.Work || strings.HasPrefix(sb.Workdir, sb.Work+string(filepath.Separator)) {
		return sb.Workdir
	}
	return sb.Work
}

// showData puts entry h where the job reads dataset d: a link under the
// data root for a process, a mount point for a container.
func (a *Agent) showData(sb runtime.Sandbox, d agentapi.DataSync, h *datacache.Handle) (runtime.DataMount, error) {
	m := runtime.DataMount{Entry: h.Name, Host: h.Path}
	root := dataRoot(sb)
	if sb.Runtime == runtime.Container {
		m.Target = path.Join(root, d.Path)
		return m, nil
	}
	m.Target = filepath.Join(root, filepath.FromSlash(d.Path))
	if _, err := os.Lstat(m.Target); err == nil {
		return m, fmt.Errorf("%s already exists in the job's working directory: choose another path", d.Path)
	}
	// Folders on the way belong to the workload user, as the rest of its
	// working tree does.
	var made []string
	for p := filepath.Dir(m.Target); p != root && strings.HasPrefix(p, root); p = filepath.Dir(p) {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			made = append(made, p)
		}
	}
	if err := os.MkdirAll(filepath.Dir(m.Target), 0o700); err != nil {
		return m, err
	}
	if sb.User != nil {
		for _, p := range made {
			if err := os.Lchown(p, sb.User.UID, sb.User.GID); err != nil {
				return m, err
			}
		}
	}
	if err := os.Symlink(h.Path, m.Target); err != nil {
		return m, err
	}
	return m, nil
}

// setFetching records (or, with nil, clears) a replica's download progress
// for the next sync. A download that starts cuts short the sync waiting
// on the server, so that its progress is reported from the start rather
// than after that long poll.
func (a *Agent) setFetching(id string, p *agentapi.DataProgress) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p == nil {
		delete(a.fetching, id)
		return
	}
	if _, had := a.fetching[id]; !had {
		ring(a.changed)
	}
	a.fetching[id] = *p
}

// fetchingRequest is the downloads in progress, by replica id.
func (a *Agent) fetchingRequestLocked() []agentapi.DataProgress {
	if len(a.fetching) == 0 {
		return nil
	}
	out := make([]agentapi.DataProgress, 0, len(a.fetching))
	for _, p := range a.fetching {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ReplicaID < out[j].ReplicaID })
	return out
}

// datasets is what the node's cache holds, for the sync.
func (a *Agent) datasets() []string {
	if a.cache == nil {
		return nil
	}
	return a.cache.Digests()
}

// permanentDataError reports whether a fetch failure will not pass by
// retrying on this or another node: the attempt fails. Storage that may
// answer later, or a cache or disk without room here, is lost (retried).
func permanentDataError(err error) bool {
	return errors.Is(err, datacache.ErrUnresolved) || errors.Is(err, datacache.ErrEmpty) ||
		errors.Is(err, objstore.ErrAccessDenied) || errors.Is(err, objstore.ErrNoBucket) ||
		errors.Is(err, datacache.ErrCorrupt) || errors.Is(err, datacache.ErrUnsafeKey) || errors.Is(err, datacache.ErrTooLarge)
}

// adoptData pins again the cache entries of a replica adopted after an
// agent restart, so that they are not evicted while it runs.
func (a *Agent) adoptData(id string, sb runtime.Sandbox) {
	if a.cache == nil || len(sb.Data) == 0 {
		return
	}
	var hs []*datacache.Handle
	for _, d := range sb.Data {
		h, ok := a.cache.Pin(d.Entry)
		if !ok {
			a.log.Warn("an adopted replica's dataset is no longer in the data cache", "replica_id", id, "entry", d.Entry)
			continue
		}
		hs = append(hs, h)
	}
	a.mu.Lock()
	a.dataHeld[id] = hs
	a.mu.Unlock()
}

// releaseData unpins a released replica's cache entries.
func (a *Agent) releaseData(id string) {
	a.mu.Lock()
	hs := a.dataHeld[id]
	delete(a.dataHeld, id)
	a.mu.Unlock()
	for _, h := range hs {
		h.Release()
	}
}
