package artifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/objstore"
)

// ErrNoStorage: the project has nowhere to keep artefacts.
var ErrNoStorage = errors.New("no artefact storage")

// Fleet is what the catalogue reads of the control plane.
type Fleet interface {
	NodePools() []*model.NodePool
	Projects() []*model.Project
	Jobs(f model.JobFilter) []*model.Job
	Job(id string) (*model.Job, error)
	JobProject(id string) (string, bool)
}

// Keys opens the sealed secrets the catalogue needs: storages'
// credentials and projects' data keys.
type Keys interface {
	// Has reports whether project holds the secret name.
	Has(project, name string) bool
	// Value opens a secret (held false: none; opened false: the server's
	// keys do not open it).
	Value(project, name string) (value string, held, opened bool)
	// DataKey returns project's data key, creating it on first use.
	DataKey(project string) ([]byte, error)
}

// Config configures a Catalog.
type Config struct {
	Fleet Fleet
	Keys  Keys
	// Open opens a storage; default objstore.Open.
	Open func(ctx context.Context, s model.Storage, c objstore.Credentials) (objstore.Store, error)
	// Grace is how old an unreferenced object must be before garbage
	// collection removes it (default 24 h; at least twice
	// ckptsync.ReuseWindow).
	Grace time.Duration
	// Interval is the retention loop's period (Run; default 10 min).
	Interval time.Duration
	// SweepEvery is how often garbage collection starts a walk over a
	// storage's keys (default 24 h); SweepKeys bounds the keys one round
	// of the walk looks at (default 1,000: one LIST request), the walk
	// resuming where the last round stopped.
	SweepEvery time.Duration
	SweepKeys  int
	Clock      clock.Clock
	Log        *slog.Logger
}

// Catalog lists, serves, takes and removes a project's artefacts. Safe for
// concurrent use.
type Catalog struct {
	cfg Config

	rounds   sync.Mutex // one retention round at a time
	mu       sync.Mutex
	stores   map[string]objstore.Store // by storage and credentials
	projects map[string]*sync.Mutex    // commit and retention, per project
	recs     map[string]*records       // by project and storage (ledger.go)
	sweeps   map[string]*sweep         // by storage (collect.go)
}

// New returns a Catalog.
func New(cfg Config) (*Catalog, error) {
	if cfg.Fleet == nil || cfg.Keys == nil {
		return nil, errors.New("artifacts: Fleet and Keys are required")
	}
	if cfg.Open == nil {
		cfg.Open = objstore.Open
	}
	if cfg.Grace == 0 {
		cfg.Grace = 24 * time.Hour
	}
	if cfg.Grace < 2*ckptsync.ReuseWindow {
		return nil, fmt.Errorf("artifacts: Grace %s must be at least twice ckptsync.ReuseWindow (%s)", cfg.Grace, ckptsync.ReuseWindow)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Minute
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = 24 * time.Hour
	}
	if cfg.SweepKeys <= 0 {
		cfg.SweepKeys = 1000
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Catalog{cfg: cfg, stores: map[string]objstore.Store{}, projects: map[string]*sync.Mutex{}, recs: map[string]*records{}, sweeps: map[string]*sweep{}}, nil
}

// place is one storage opened for one project.
type place struct {
	id    string // the storage and credentials, hashed
	desc  string // s3://bucket/prefix or a path
	store objstore.Store
	seal  *objstore.Sealer
}

func (c *Catalog) projectLock(project string) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.projects[project]
	if l == nil {
		l = &sync.Mutex{}
		c.projects[project] = l
	}
	return l
}

func (c *Catalog) policy(project string) *model.ArtifactPolicy {
	for _, p := range c.cfg.Fleet.Projects() {
		if p.Name == project {
			return p.Spec.Artifacts
		}
	}
	return nil
}

// storages returns the distinct storages the fleet declares for
// checkpoints (every pool's checkpointStorage) and project's own, in a
// stable order, and the one pushes go to.
func (c *Catalog) storages(project string) (all []model.Storage, push *model.Storage, err error) {
	seen := map[string]bool{}
	add := func(s model.Storage) {
		k, _ := json.Marshal(s)
		if !seen[string(k)] {
			seen[string(k)] = true
			all = append(all, s)
		}
	}
	var pools []model.Storage
	for _, p := range c.cfg.Fleet.NodePools() {
		if p.Spec.CheckpointStorage != nil {
			pools = append(pools, *p.Spec.CheckpointStorage)
			add(*p.Spec.CheckpointStorage)
		}
	}
	poolCount := len(all)
	if pol := c.policy(project); pol != nil && pol.Storage != nil {
		s := *pol.Storage
		add(s)
		return all, &s, nil
	}
	switch poolCount {
	case 0:
		return all, nil, fmt.Errorf("project %s: %w: no NodePool declares checkpointStorage; set spec.artifacts.storage in Project %s", project, ErrNoStorage, project)
	case 1:
		s := pools[0]
		return all, &s, nil
	}
	return all, nil, fmt.Errorf("project %s: the fleet's pools use %d checkpoint storages; set spec.artifacts.storage in Project %s to choose where pushes go: %w", project, poolCount, project, ErrNoStorage)
}

// open opens s for project's use; seal is nil when the project has no data
// key yet and create is false (then it has nothing stored).
func (c *Catalog) open(ctx context.Context, project string, s model.Storage, create bool) (place, error) {
	var cr objstore.Credentials
	if s.S3 != nil && s.S3.CredentialsRef != "" {
		p, name, _ := s.S3.CredentialsRef.Split()
		v, held, opened := c.cfg.Keys.Value(p, name)
		switch {
		case !held:
			return place{}, fmt.Errorf("credentials of storage %s: secret %s: %w", s.String(), s.S3.CredentialsRef, model.ErrNotFound)
		case !opened:
			return place{}, fmt.Errorf("credentials of storage %s: secret %s does not open with this server's keys", s.String(), s.S3.CredentialsRef)
		}
		id, secret, ok := strings.Cut(strings.TrimSpace(v), ":")
		if !ok || id == "" || secret == "" {
			return place{}, fmt.Errorf("credentials of storage %s: secret %s must be ACCESS_KEY_ID:SECRET_ACCESS_KEY", s.String(), s.S3.CredentialsRef)
		}
		cr = objstore.Credentials{AccessKeyID: id, SecretAccessKey: secret}
	}
	spec, _ := json.Marshal(s)
	ck := sha256.Sum256([]byte(string(spec) + "\x00" + cr.AccessKeyID + "\x00" + cr.SecretAccessKey))
	k := hex.EncodeToString(ck[:])
	c.mu.Lock()
	st := c.stores[k]
	c.mu.Unlock()
	if st == nil {
		var err error
		if st, err = c.cfg.Open(ctx, s, cr); err != nil {
			return place{}, fmt.Errorf("opening storage %s: %w", s.String(), err)
		}
		c.mu.Lock()
		c.stores[k] = st
		c.mu.Unlock()
	}
	pl := place{id: k, desc: s.String(), store: st}
	if !create && !c.cfg.Keys.Has(project, model.DataKeySecret) {
		return pl, nil
	}
	key, err := c.cfg.Keys.DataKey(project)
	if err != nil {
		return place{}, fmt.Errorf("project %s's data key: %w", project, err)
	}
	if pl.seal, err = objstore.NewSealer(key); err != nil {
		return place{}, err
	}
	return pl, nil
}

// places opens every storage that may hold project's artefacts; those
// the project has no data key for are left out (nothing of it is there).
func (c *Catalog) places(ctx context.Context, project string) ([]place, error) {
	all, _, _ := c.storages(project)
	var out []place
	for _, s := range all {
		pl, err := c.open(ctx, project, s, false)
		if err != nil {
			return nil, err
		}
		if pl.seal != nil {
			out = append(out, pl)
		}
	}
	return out, nil
}

// pushPlace opens where project's pushes go, creating its data key.
func (c *Catalog) pushPlace(ctx context.Context, project string) (place, error) {
	_, push, err := c.storages(project)
	if err != nil {
		return place{}, err
	}
	return c.open(ctx, project, *push, true)
}

// projectJobs maps the folder prefix of every job of project (under sl)
// to its id.
func (c *Catalog) projectJobs(project string, sl *objstore.Sealer) map[string]string {
	out := map[string]string{}
	for _, j := range c.cfg.Fleet.Jobs(model.JobFilter{Project: project, Limit: math.MaxInt32}) {
		out[ckptsync.JobPrefix(sl, j.ID)] = j.ID
	}
	return out
}

// indexPrefix is the folder of project's pushed artefacts' manifests.
func indexPrefix(sl *objstore.Sealer) string {
	sum := sha256.Sum256([]byte("artifacts index"))
	return sl.Name(sum[:])[:32] + "/"
}

// setID is the opaque id of the artefact named name.
func setID(sl *objstore.Sealer, name string) string {
	sum := sha256.Sum256([]byte("artifact\x00" + name))
	return sl.Name(sum[:])[:32]
}

// setMarker is the key of a set's marker object.
const setMarker = "~"

func view(project, kind, storage string, m ckptsync.Manifest, files bool) model.Artifact {
	a := model.Artifact{Project: project, Kind: kind, Job: m.JobID, Name: m.Name, Step: m.Step, Tags: m.Tags, Attempt: m.AttemptNumber,
		Uploaded: m.Uploaded, Bytes: m.Bytes(), Count: len(m.Files), Storage: storage, Version: m.Release}
	if files {
		a.Files = make([]model.ArtifactFile, len(m.Files))
		for i, f := range m.Files {
			a.Files[i] = model.ArtifactFile{Path: f.Path, Size: f.Size, SHA256: f.SHA256, Mode: f.Mode}
		}
	}
	return a
}

// corrupt marks err, when the storage's bytes failed verification, with
// model.ErrCorrupt too, so the API can say so.
func corrupt(err error) error {
	if errors.Is(err, objstore.ErrCorrupt) && !errors.Is(err, model.ErrCorrupt) {
		return fmt.Errorf("%w: %w", model.ErrCorrupt, err)
	}
	return err
}

// notFound marks a store's ErrNotFound as model.ErrNotFound too.
func notFound(err error) error {
	if errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, model.ErrNotFound) {
		return fmt.Errorf("%w: %w", model.ErrNotFound, err)
	}
	return err
}
