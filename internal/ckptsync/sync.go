package ckptsync

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/objstore"
)

// ErrSuperseded: a later attempt of the job has published a checkpoint;
// this (older) attempt's upload is not made latest.
var ErrSuperseded = errors.New("a later attempt of the job has published a checkpoint")

// ErrChanged: a file changed while it was uploaded; the checkpoint was not
// published (the previous one stays latest) and the next round retries.
var ErrChanged = errors.New("a checkpoint file changed while it was uploaded")

// DefaultInterval is how often a watch looks for a new LATEST marker when
// the control plane names no interval.
const DefaultInterval = 5 * time.Second

// hiddenPrefix marks this package's own files in a checkpoint folder; they
// are never uploaded.
const hiddenPrefix = ".gpufleet-"

// Config configures a Syncer.
type Config struct {
	// Store is the storage, already scoped to the pool's prefix.
	Store objstore.Store
	// Sealer holds the job's project's data key.
	Sealer *objstore.Sealer
	JobID  string
	// Attempt is recorded in the manifests it uploads; AttemptNumber
	// orders attempts, so that a late upload of an older attempt (a node
	// cut off and still running it) never replaces a newer one's latest.
	Attempt       string
	AttemptNumber int
	// Dir is the attempt's local checkpoint folder.
	Dir   string
	Clock clock.Clock // default real
	Log   *slog.Logger
}

// Syncer syncs one attempt's checkpoint folder with its job's checkpoints.
type Syncer struct {
	cfg    Config
	prefix string

	mu sync.Mutex
	// last is the marker (content and modification time) of the
	// checkpoint last uploaded or restored, so an unchanged marker costs
	// a stat.
	last   marker
	stored map[string]bool // objects known to be in the store

	// uploaded is the last checkpoint this Syncer uploaded; read without
	// mu, which an upload holds for long.
	uploaded atomic.Pointer[Manifest]
}

type marker struct {
	content string
	mtime   time.Time
}

// New returns a Syncer for cfg.
func New(cfg Config) (*Syncer, error) {
	if cfg.Store == nil || cfg.Sealer == nil || cfg.JobID == "" || !filepath.IsAbs(cfg.Dir) {
		return nil, errors.New("ckptsync: Store, Sealer, JobID and an absolute Dir must be set")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Syncer{cfg: cfg, prefix: JobPrefix(cfg.Sealer, cfg.JobID), stored: map[string]bool{}}, nil
}

// Prefix is the job's folder in the store (opaque), for tests and tools.
func (s *Syncer) Prefix() string { return s.prefix }

func (s *Syncer) latestKey() string            { return s.prefix + "latest" }
func (s *Syncer) objectKey(name string) string { return ObjectKey(s.prefix, name) }

// Uploaded returns the last checkpoint this Syncer uploaded; ok is false
// before the first. It does not wait for an upload in flight.
func (s *Syncer) Uploaded() (m Manifest, ok bool) {
	if p := s.uploaded.Load(); p != nil {
		return *p, true
	}
	return Manifest{}, false
}

// Latest returns the job's latest complete checkpoint; ok is false when it
// has none.
func (s *Syncer) Latest(ctx context.Context) (m Manifest, ok bool, err error) {
	key := s.latestKey()
	m, err = ReadManifest(ctx, s.cfg.Store, s.cfg.Sealer, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return Manifest{}, false, nil
	}
	if err != nil {
		return Manifest{}, false, fmt.Errorf("reading the latest checkpoint: %w", err)
	}
	if m.JobID != s.cfg.JobID {
		return Manifest{}, false, fmt.Errorf("manifest %s is job %s's, not %s: %w", key, m.JobID, s.cfg.JobID, objstore.ErrCorrupt)
	}
	return m, true, nil
}

// Restore downloads the job's latest complete checkpoint into Dir, unless
// Dir already holds it or a later one (by step). ok is false when the job
// has no checkpoint yet. Files arrive in a hidden folder, are verified, and
// are moved into place only when all arrived, LATEST last.
func (s *Syncer) Restore(ctx context.Context) (m Manifest, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok, err = s.Latest(ctx)
	if err != nil || !ok {
		return m, ok, err
	}
	if local, err := readMarker(s.cfg.Dir); err == nil {
		step, _ := parseMarker([]byte(local.content), local.mtime)
		if local.content == m.Marker || step > m.Step {
			s.cfg.Log.Info("checkpoint folder already holds this or a later checkpoint", "step", step, "stored_step", m.Step)
			s.last = local
			if local.content == m.Marker {
				s.remember(m) // its objects are stored: never sent again
			}
			return m, true, nil
		}
	}
	tmp, err := os.MkdirTemp(s.cfg.Dir, hiddenPrefix+"restore-")
	if err != nil {
		return m, false, fmt.Errorf("restoring: %w", err)
	}
	defer os.RemoveAll(tmp)
	var markerFile *File
	for i := range m.Files {
		f := &m.Files[i]
		if err := checkPath(f.Path); err != nil {
			return m, false, fmt.Errorf("manifest of step %d: %w: %w", m.Step, err, objstore.ErrCorrupt)
		}
		if err := s.download(ctx, *f, filepath.Join(tmp, filepath.FromSlash(f.Path))); err != nil {
			return m, false, err
		}
		if f.Path == Marker {
			markerFile = f
		}
	}
	for _, f := range m.Files {
		if f.Path == Marker {
			continue
		}
		if err := moveIn(tmp, s.cfg.Dir, f.Path); err != nil {
			return m, false, err
		}
	}
	if markerFile != nil {
		if err := moveIn(tmp, s.cfg.Dir, Marker); err != nil {
			return m, false, err
		}
	}
	if local, err := readMarker(s.cfg.Dir); err == nil {
		s.last = local
	}
	s.remember(m)
	return m, true, nil
}

// Adopt takes the checkpoint in Dir as already stored when it is the job's
// latest (its LATEST marker is the one latest records), so that Upload
// does not send it again; any other marker, newer or not, is uploaded at
// the next Upload. It downloads nothing. A process that syncs a folder
// another one restored (a Kubernetes pod's sidecar after its restore
// container) starts with it.
func (s *Syncer) Adopt(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok, err := s.Latest(ctx)
	if err != nil || !ok {
		return err
	}
	if local, err := readMarker(s.cfg.Dir); err == nil && local.content == m.Marker {
		s.last = local
		s.remember(m)
	}
	return nil
}

// remember makes m's objects the ones known stored: those of the latest
// checkpoint, which retention never removes (package artifacts), so an
// upload may name them without looking.
func (s *Syncer) remember(m Manifest) {
	s.stored = make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		s.stored[f.Object] = true
	}
}

func (s *Syncer) download(ctx context.Context, f File, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("restoring %s: %w", f.Path, err)
	}
	rc, err := OpenFile(ctx, s.cfg.Store, s.cfg.Sealer, s.prefix, f)
	if err != nil {
		return fmt.Errorf("restoring %s: %w", f.Path, err)
	}
	defer rc.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fs.FileMode(f.Mode&0o777)|0o600)
	if err != nil {
		return fmt.Errorf("restoring %s: %w", f.Path, err)
	}
	defer out.Close()
	if _, err := io.Copy(out, rc); err != nil {
		return fmt.Errorf("restoring %s: %w", f.Path, err)
	}
	return out.Close()
}

// moveIn renames tmp/rel to dir/rel.
func moveIn(tmp, dir, rel string) error {
	dst := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("restoring %s: %w", rel, err)
	}
	if err := os.Rename(filepath.Join(tmp, filepath.FromSlash(rel)), dst); err != nil {
		return fmt.Errorf("restoring %s: %w", rel, err)
	}
	return nil
}

func checkPath(p string) error {
	if err := objstore.CheckKey(p); err != nil || strings.HasPrefix(p, hiddenPrefix) {
		return fmt.Errorf("unsafe path %q", p)
	}
	return nil
}

// readMarker reads the LATEST marker of dir, never through a link that
// leaves dir.
func readMarker(dir string) (marker, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return marker{}, err
	}
	defer root.Close()
	f, err := root.Open(Marker)
	if err != nil {
		return marker{}, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return marker{}, err
	}
	if !info.Mode().IsRegular() {
		return marker{}, fmt.Errorf("%s is not a file", Marker)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxMarker))
	if err != nil {
		return marker{}, err
	}
	return marker{content: string(data), mtime: info.ModTime()}, nil
}

// Upload sends Dir as a new checkpoint when its LATEST marker changed since
// the last upload or restore; uploaded is false when there was nothing new
// (no marker, or the same one). The previous checkpoint stays latest until
// every object and the manifest are stored.
func (s *Syncer) Upload(ctx context.Context) (m Manifest, uploaded bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mk, err := readMarker(s.cfg.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, false, nil
	}
	if err != nil {
		return Manifest{}, false, fmt.Errorf("reading %s: %w", Marker, err)
	}
	if mk == s.last {
		return Manifest{}, false, nil
	}
	step, at := parseMarker([]byte(mk.content), mk.mtime)
	m = Manifest{Version: 1, JobID: s.cfg.JobID, Attempt: s.cfg.Attempt, AttemptNumber: s.cfg.AttemptNumber, Step: step, Time: at, Marker: mk.content}
	root, err := os.OpenRoot(s.cfg.Dir)
	if err != nil {
		return Manifest{}, false, fmt.Errorf("opening the checkpoint folder: %w", err)
	}
	defer root.Close()
	err = fs.WalkDir(root.FS(), ".", func(rel string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile
			}
			return err
		}
		if strings.HasPrefix(e.Name(), hiddenPrefix) {
			if e.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() {
			return nil // folders are implied; links and devices are not checkpoints
		}
		f, err := s.putFile(ctx, root, rel)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		m.Files = append(m.Files, f)
		return nil
	})
	if err != nil {
		return Manifest{}, false, fmt.Errorf("uploading the checkpoint of step %d: %w", step, err)
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	m.Uploaded = s.cfg.Clock.Now().UTC()
	data, err := json.Marshal(m)
	if err != nil {
		return Manifest{}, false, err
	}
	hist := HistoryKey(s.prefix, s.cfg.Sealer, data)
	// A newer attempt's latest stays latest. (Read, then write: not atomic,
	// but an older attempt uploads only while its node has not yet heard
	// that the attempt ended, a short window.)
	if cur, ok, err := s.Latest(ctx); err != nil {
		return Manifest{}, false, fmt.Errorf("publishing the checkpoint of step %d: %w", step, err)
	} else if ok && cur.AttemptNumber > s.cfg.AttemptNumber {
		return Manifest{}, false, fmt.Errorf("checkpoint of step %d of attempt %d: attempt %d published step %d: %w", step, s.cfg.AttemptNumber, cur.AttemptNumber, cur.Step, ErrSuperseded)
	}
	// The history copy first, latest last: until latest is replaced, the
	// previous checkpoint is the latest.
	for _, key := range []string{hist, s.latestKey()} {
		if _, err := s.cfg.Store.Put(ctx, key, s.cfg.Sealer.Seal(bytes.NewReader(data), key), objstore.SealedSize(int64(len(data)))); err != nil {
			return Manifest{}, false, fmt.Errorf("publishing the checkpoint of step %d: %w", step, err)
		}
	}
	s.last = mk
	s.remember(m)
	s.uploaded.Store(&m)
	return m, true, nil
}

// putFile stores the file rel of the folder unless its content is stored
// already, and describes it. The file is opened through root, so that a
// job swapping a file or folder for a link cannot make the agent read
// anything outside its checkpoint folder, and read twice from the same
// descriptor (to name it, then to send it).
func (s *Syncer) putFile(ctx context.Context, root *os.Root, rel string) (File, error) {
	in, err := root.Open(filepath.FromSlash(rel))
	if err != nil {
		return File{}, err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return File{}, err
	}
	if !info.Mode().IsRegular() {
		return File{}, fmt.Errorf("%s: %w", rel, ErrChanged) // replaced by a link or folder meanwhile
	}
	h := sha256.New()
	n, err := io.Copy(h, in)
	if err != nil {
		return File{}, err
	}
	sum := h.Sum(nil)
	f := File{Path: rel, Size: n, SHA256: hex.EncodeToString(sum), Object: s.cfg.Sealer.Name(sum), Mode: uint32(info.Mode().Perm())}
	key := s.objectKey(f.Object)
	if s.stored[f.Object] {
		return f, nil
	}
	// An object found in the store but referenced by no checkpoint this
	// syncer knows is reused only when recent: older unreferenced objects
	// are garbage that collection may be removing right now.
	if st, err := s.cfg.Store.Stat(ctx, key); err == nil && st.Size == objstore.SealedSize(n) && s.cfg.Clock.Now().Sub(st.Modified) < ReuseWindow {
		return f, nil
	} else if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return File{}, err
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return File{}, err
	}
	h.Reset()
	src := io.TeeReader(io.LimitReader(in, n), h)
	if _, err := s.cfg.Store.Put(ctx, key, s.cfg.Sealer.Seal(src, key), objstore.SealedSize(n)); err != nil {
		return File{}, err
	}
	if got := h.Sum(nil); !bytes.Equal(got, sum) {
		// Its name is of content it no longer holds: remove it, so that
		// no later checkpoint trusts it.
		if err := s.cfg.Store.Delete(context.WithoutCancel(ctx), key); err != nil {
			s.cfg.Log.Error("removing an object uploaded from a changing file", "object", key, "err", err)
		}
		return File{}, fmt.Errorf("%s: %w", rel, ErrChanged)
	}
	return f, nil
}

// Watch uploads a new checkpoint whenever the job rewrites its marker,
// looking every interval, until ctx ends. Failures are logged and retried
// at the next look; the previous checkpoint stays latest meanwhile.
func (s *Syncer) Watch(ctx context.Context, interval time.Duration) {
	t := s.cfg.Clock.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		m, ok, err := s.Upload(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.cfg.Log.Warn("uploading checkpoint", "job_id", s.cfg.JobID, "err", err)
		case ok:
			s.cfg.Log.Info("uploaded checkpoint", "job_id", s.cfg.JobID, "step", m.Step, "files", len(m.Files), "bytes", m.Bytes())
		}
	}
}
