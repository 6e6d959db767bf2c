package datacache

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/atomicfile"
	"github.com/gpufleet/gpufleet/internal/objstore"
)

// Errors callers branch on.
var (
	// ErrTooLarge: the dataset is larger than the cache's cap.
	ErrTooLarge = errors.New("dataset is larger than the node's data cache")
	// ErrFull: the cache (its cap, or the disk under it) has no room, even
	// after evicting every entry no running attempt uses.
	ErrFull = errors.New("no room in the node's data cache")
	// ErrCorrupt: an object's bytes do not match its listing (size or
	// checksum).
	ErrCorrupt = errors.New("object does not match its listing (size or checksum): corrupt or changed while downloading")
	// ErrUnsafeKey: an object's key cannot be a file under the dataset's
	// folder ("..", an absolute or empty segment).
	ErrUnsafeKey = errors.New("object key is not a safe relative path")
)

// Dataset is what Acquire fetches.
type Dataset struct {
	// Project owns the data: entries are never shared between projects.
	Project string
	// Digest names the dataset for the scheduler (model.DataDigest); it is
	// what Digests reports.
	Digest string
	// Source describes it in errors ("storage:lake/imagenet").
	Source string
	// Objects is the listing to download, keys relative to the dataset's
	// prefix ("train/00001.tar"). Each object's Size is checked, its ETag
	// when plain (32 hex digits: the MD5 of the content), and its SHA256
	// when the store listed one.
	Objects []objstore.Info
	// Open reads one object by its Key.
	Open func(ctx context.Context, key string) (io.ReadCloser, error)
}

// Config configures a Cache.
type Config struct {
	// Root is the cache's folder (created 0711).
	Root string
	// MaxBytes caps the bytes of all entries (0: 100 GiB).
	MaxBytes int64
	// Workers is how many objects one download fetches at once (0: 4).
	Workers int
	// Now is the clock for least-recently-used order (nil: time.Now).
	Now func() time.Time
}

// DefaultMaxBytes is the cap when Config.MaxBytes is 0.
const DefaultMaxBytes = 100 << 30

// Cache is a node's dataset cache. Safe for concurrent use.
type Cache struct {
	cfg Config
	key []byte

	mu       sync.Mutex
	entries  map[string]*entry  // by name
	flights  map[string]*flight // downloads in progress, by name
	used     int64              // bytes of entries
	reserved int64              // bytes of downloads in progress
}

type entry struct {
	meta
	name string
	pins int
}

// meta is an entry's record, in meta/<name>.json.
type meta struct {
	Digest   string    `json:"digest"`
	Source   string    `json:"source"`
	Bytes    int64     `json:"bytes"`
	Objects  int       `json:"objects"`
	LastUsed time.Time `json:"lastUsed"`
}

type flight struct {
	done    chan struct{}
	err     error
	bytes   atomic.Int64
	waiters atomic.Int32
	total   int64
}

// Folders under Root.
const (
	dirEntries = "e"
	dirMeta    = "meta"
	dirTmp     = "tmp"
	keyFile    = "key"
)

// Open opens (or creates) the cache at cfg.Root: it removes what a crash
// left half-made (temporary downloads, entries without a record, records
// without an entry) and loads the rest.
func Open(cfg Config) (*Cache, error) {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Cache{cfg: cfg, entries: map[string]*entry{}, flights: map[string]*flight{}}
	for _, d := range []string{cfg.Root, filepath.Join(cfg.Root, dirEntries)} {
		if err := passable(d); err != nil {
			return nil, fmt.Errorf("creating the data cache: %w", err)
		}
	}
	for _, d := range []string{dirMeta, dirTmp} {
		if err := os.MkdirAll(filepath.Join(cfg.Root, d), 0o700); err != nil {
			return nil, fmt.Errorf("creating the data cache: %w", err)
		}
	}
	key, err := loadKey(filepath.Join(cfg.Root, keyFile))
	if err != nil {
		return nil, err
	}
	c.key = key
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

// passable makes dir with mode 0711: others may pass through, not list.
func passable(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	return os.Chmod(dir, 0o711)
}

func loadKey(p string) ([]byte, error) {
	b, err := os.ReadFile(p)
	if err == nil && len(b) == 32 {
		return b, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the data cache's key: %w", err)
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(p, b, 0o600); err != nil {
		return nil, fmt.Errorf("writing the data cache's key: %w", err)
	}
	return b, nil
}

func (c *Cache) load() error {
	tmp := filepath.Join(c.cfg.Root, dirTmp)
	olds, _ := os.ReadDir(tmp)
	for _, o := range olds {
		if err := removeTree(filepath.Join(tmp, o.Name())); err != nil {
			return fmt.Errorf("removing a partial download: %w", err)
		}
	}
	metas := map[string]meta{}
	mdir := filepath.Join(c.cfg.Root, dirMeta)
	ms, err := os.ReadDir(mdir)
	if err != nil {
		return err
	}
	for _, m := range ms {
		name, ok := strings.CutSuffix(m.Name(), ".json")
		var v meta
		b, err := os.ReadFile(filepath.Join(mdir, m.Name()))
		if !ok || err != nil || json.Unmarshal(b, &v) != nil {
			_ = os.Remove(filepath.Join(mdir, m.Name()))
			continue
		}
		metas[name] = v
	}
	edir := filepath.Join(c.cfg.Root, dirEntries)
	es, err := os.ReadDir(edir)
	if err != nil {
		return err
	}
	for _, e := range es {
		v, ok := metas[e.Name()]
		if !ok {
			// Renamed into place but its record never written: a crash
			// between the two. Not trusted.
			if err := removeTree(filepath.Join(edir, e.Name())); err != nil {
				return fmt.Errorf("removing an unrecorded cache entry: %w", err)
			}
			continue
		}
		delete(metas, e.Name())
		c.entries[e.Name()] = &entry{meta: v, name: e.Name()}
		c.used += v.Bytes
	}
	for name := range metas {
		_ = os.Remove(filepath.Join(mdir, name+".json"))
	}
	return nil
}

// Handle is an acquired entry, pinned until Release.
type Handle struct {
	// Path is the entry's folder: the dataset's objects by key.
	Path string
	// Name is the entry's name (for Pin after a restart).
	Name string
	// Hit is true when the entry was in the cache before (no download by
	// this call).
	Hit  bool
	c    *Cache
	once sync.Once
}

// Release unpins the entry. Idempotent.
func (h *Handle) Release() {
	if h == nil {
		return
	}
	h.once.Do(func() { h.c.unpin(h.Name) })
}

// Name is the entry name of ds: a keyed hash of its project, digest and
// listing.
func (c *Cache) Name(ds Dataset) string {
	objs := append([]objstore.Info(nil), ds.Objects...)
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key < objs[j].Key })
	m := hmac.New(sha256.New, c.key)
	fmt.Fprintf(m, "%q %q\n", ds.Project, ds.Digest)
	for _, o := range objs {
		fmt.Fprintf(m, "%q %d %q\n", o.Key, o.Size, o.ETag)
	}
	return hex.EncodeToString(m.Sum(nil))
}

// Acquire returns ds's entry, downloading it when the cache lacks it, and
// pins it until the handle is released. Concurrent calls for one entry
// download it once; progress, when set, is called from time to time with
// the bytes downloaded and the total. Errors name the source and, for an
// object, its key.
func (c *Cache) Acquire(ctx context.Context, ds Dataset, progress func(done, total int64)) (*Handle, error) {
	name := c.Name(ds)
	var total int64
	for _, o := range ds.Objects {
		total += o.Size
	}
	for {
		c.mu.Lock()
		if e, ok := c.entries[name]; ok {
			e.pins++
			e.LastUsed = c.cfg.Now()
			c.mu.Unlock()
			c.touch(e.name)
			if progress != nil {
				progress(total, total)
			}
			return &Handle{Path: c.entryPath(name), Name: name, Hit: true, c: c}, nil
		}
		if f, ok := c.flights[name]; ok {
			c.mu.Unlock()
			if err := waitFlight(ctx, f, progress); err != nil {
				return nil, err
			}
			continue // landed (or failed for the other caller): look again
		}
		if total > c.cfg.MaxBytes {
			c.mu.Unlock()
			return nil, fmt.Errorf("%s: %s: %w (cap %s, agent flag --data-cache-size)", ds.Source, fmtBytes(total), ErrTooLarge, fmtBytes(c.cfg.MaxBytes))
		}
		trash, err := c.makeRoomLocked(total)
		if err != nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("%s needs %s: %w", ds.Source, fmtBytes(total), err)
		}
		f := &flight{done: make(chan struct{}), total: total}
		c.flights[name] = f
		c.reserved += total
		c.mu.Unlock()
		removeAll(trash)

		err = c.download(ctx, ds, name, f, progress)
		c.mu.Lock()
		delete(c.flights, name)
		c.reserved -= total
		if err == nil {
			e := &entry{name: name, pins: 1, meta: meta{Digest: ds.Digest, Source: ds.Source, Bytes: total, Objects: len(ds.Objects), LastUsed: c.cfg.Now()}}
			c.entries[name] = e
			c.used += total
		}
		f.err = err
		close(f.done)
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return &Handle{Path: c.entryPath(name), Name: name, c: c}, nil
	}
}

// waitFlight waits for another caller's download of the same entry,
// reporting its progress.
func waitFlight(ctx context.Context, f *flight, progress func(done, total int64)) error {
	f.waiters.Add(1)
	defer f.waiters.Add(-1)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-f.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if progress != nil {
				progress(f.bytes.Load(), f.total)
			}
		}
	}
}

// Pin pins the entry name (an attempt adopted after an agent restart still
// reads it); false when the cache has no such entry.
func (c *Cache) Pin(name string) (*Handle, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[name]
	if !ok {
		return nil, false
	}
	e.pins++
	return &Handle{Path: c.entryPath(name), Name: name, Hit: true, c: c}, true
}

func (c *Cache) unpin(name string) {
	c.mu.Lock()
	e, ok := c.entries[name]
	if ok && e.pins > 0 {
		e.pins--
		e.LastUsed = c.cfg.Now()
	}
	c.mu.Unlock()
	if ok {
		c.touch(name)
	}
}

// touch records an entry's last use on disk, so that the order survives a
// restart. Best effort: the order is a preference.
func (c *Cache) touch(name string) {
	c.mu.Lock()
	e, ok := c.entries[name]
	var m meta
	if ok {
		m = e.meta
	}
	c.mu.Unlock()
	if ok {
		_ = c.writeMeta(name, m)
	}
}

func (c *Cache) writeMeta(name string, m meta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(c.cfg.Root, dirMeta, name+".json"), b, 0o600)
}

// makeRoomLocked evicts unpinned entries, least recently used first, until
// need more bytes fit under the cap. Callers hold c.mu.
func (c *Cache) makeRoomLocked(need int64) (trash []string, err error) {
	if c.used+c.reserved+need <= c.cfg.MaxBytes {
		return nil, nil
	}
	var free []*entry
	for _, e := range c.entries {
		if e.pins == 0 {
			free = append(free, e)
		}
	}
	sort.Slice(free, func(i, j int) bool { return free[i].LastUsed.Before(free[j].LastUsed) })
	var freeable int64
	for _, e := range free {
		freeable += e.Bytes
	}
	if c.used+c.reserved+need-freeable > c.cfg.MaxBytes {
		return nil, fmt.Errorf("%w: %s of %s in use by running attempts or downloads (cap %s, agent flag --data-cache-size)",
			ErrFull, fmtBytes(c.used-freeable+c.reserved), fmtBytes(c.used+c.reserved), fmtBytes(c.cfg.MaxBytes))
	}
	for _, e := range free {
		if c.used+c.reserved+need <= c.cfg.MaxBytes {
			break
		}
		trash = append(trash, c.evictLocked(e))
	}
	return trash, nil
}

// evictLocked takes an unpinned entry out of the cache: its record first
// (a crash after that leaves an unrecorded entry, which Open removes),
// then its folder, moved aside; the caller removes the returned folder
// once it has let go of c.mu. Callers hold c.mu.
func (c *Cache) evictLocked(e *entry) string {
	delete(c.entries, e.name)
	c.used -= e.Bytes
	_ = os.Remove(filepath.Join(c.cfg.Root, dirMeta, e.name+".json"))
	trash := filepath.Join(c.cfg.Root, dirTmp, "evicted-"+e.name)
	if err := os.Rename(c.entryPath(e.name), trash); err != nil {
		return c.entryPath(e.name)
	}
	return trash
}

func removeAll(paths []string) {
	for _, p := range paths {
		_ = removeTree(p)
	}
}

// Evict removes every entry no attempt uses (gpufleet agent maintenance,
// tests); it returns the bytes freed.
func (c *Cache) Evict() int64 {
	c.mu.Lock()
	var n int64
	var trash []string
	for _, e := range c.entries {
		if e.pins == 0 {
			n += e.Bytes
			trash = append(trash, c.evictLocked(e))
		}
	}
	c.mu.Unlock()
	removeAll(trash)
	return n
}

func (c *Cache) entryPath(name string) string { return filepath.Join(c.cfg.Root, dirEntries, name) }

// Digests are the dataset digests of the entries the cache holds, sorted
// and without repeats: what the node reports to the scheduler.
func (c *Cache) Digests() []string {
	c.mu.Lock()
	seen := map[string]bool{}
	for _, e := range c.entries {
		if e.Digest != "" {
			seen[e.Digest] = true
		}
	}
	c.mu.Unlock()
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// Stats is the cache's occupancy.
type Stats struct {
	Entries, Pinned int
	Bytes, MaxBytes int64
}

// Stats returns the cache's occupancy.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Entries: len(c.entries), Bytes: c.used, MaxBytes: c.cfg.MaxBytes}
	for _, e := range c.entries {
		if e.pins > 0 {
			s.Pinned++
		}
	}
	return s
}

// download fetches every object of ds into a temporary folder (Fetch),
// makes the tree read-only and renames it into place.
func (c *Cache) download(ctx context.Context, ds Dataset, name string, f *flight, progress func(done, total int64)) (err error) {
	tmp, err := os.MkdirTemp(filepath.Join(c.cfg.Root, dirTmp), name[:16]+"-")
	if err != nil {
		return fmt.Errorf("%s: creating a download folder: %w", ds.Source, err)
	}
	defer func() {
		if err != nil {
			_ = removeTree(tmp)
		}
	}()
	if err := Fetch(ctx, ds, tmp, FetchOptions{Workers: c.cfg.Workers, Bytes: &f.bytes, Progress: progress}); err != nil {
		return err
	}
	if err := ReadOnlyTree(tmp); err != nil {
		return fmt.Errorf("%s: %w", ds.Source, err)
	}
	m := meta{Digest: ds.Digest, Source: ds.Source, Bytes: f.total, Objects: len(ds.Objects), LastUsed: c.cfg.Now()}
	if err := os.Rename(tmp, c.entryPath(name)); err != nil {
		return fmt.Errorf("%s: moving the download into the cache: %w", ds.Source, err)
	}
	if err := c.writeMeta(name, m); err != nil {
		_ = removeTree(c.entryPath(name))
		return fmt.Errorf("%s: recording the cache entry: %w", ds.Source, err)
	}
	_ = atomicfile.SyncDir(filepath.Join(c.cfg.Root, dirEntries))
	return nil
}

// safeKey is key as a clean relative path, "" for a folder marker.
func safeKey(key string) (string, error) {
	if strings.HasSuffix(key, "/") {
		k := strings.TrimSuffix(key, "/")
		if k == "" {
			return "", nil
		}
		if _, err := safeKey(k); err != nil {
			return "", err
		}
		return "", nil
	}
	if key == "" || strings.ContainsAny(key, "\x00\\") || path.IsAbs(key) || path.Clean(key) != key || key == ".." || strings.HasPrefix(key, "../") {
		return "", ErrUnsafeKey
	}
	return key, nil
}

// ReadOnlyTree makes files 0444 and folders 0555 under (and including)
// root, so that workloads can read an entry and not change it.
func ReadOnlyTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		return os.Chmod(p, 0o444)
	})
	if err != nil {
		return fmt.Errorf("making the download read-only: %w", err)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i], 0o555); err != nil {
			return fmt.Errorf("making the download read-only: %w", err)
		}
	}
	return nil
}

// removeTree removes a read-only tree (its folders are made writable
// first).
func removeTree(root string) error {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(root)
}

func fmtBytes(n int64) string {
	const gib = 1 << 30
	switch {
	case n >= gib/10:
		return fmt.Sprintf("%.1f GiB", float64(n)/gib)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}
