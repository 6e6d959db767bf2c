package datacache

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/objstore"
)

// bucket is an in-memory source of objects that counts reads.
type bucket struct {
	mu      sync.Mutex
	objects map[string][]byte
	reads   atomic.Int64
	// gate, when set, is waited on before each read (to hold downloads
	// in flight).
	gate chan struct{}
	// failAt makes reading that key fail after half its bytes.
	failAt string
}

func newBucket(objs map[string]string) *bucket {
	b := &bucket{objects: map[string][]byte{}}
	for k, v := range objs {
		b.objects[k] = []byte(v)
	}
	return b
}

func (b *bucket) dataset(project, digest string) Dataset {
	b.mu.Lock()
	defer b.mu.Unlock()
	ds := Dataset{Project: project, Digest: digest, Source: "test://" + digest, Open: b.open}
	for k, v := range b.objects {
		sum := md5.Sum(v)
		ds.Objects = append(ds.Objects, objstore.Info{Key: k, Size: int64(len(v)), ETag: `"` + hex.EncodeToString(sum[:]) + `"`})
	}
	return ds
}

func (b *bucket) open(ctx context.Context, key string) (io.ReadCloser, error) {
	if b.gate != nil {
		select {
		case <-b.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	b.reads.Add(1)
	b.mu.Lock()
	v, ok := b.objects[key]
	b.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no object %s", key)
	}
	if key == b.failAt {
		return io.NopCloser(io.MultiReader(bytes.NewReader(v[:len(v)/2]), errReader{})), nil
	}
	return io.NopCloser(bytes.NewReader(v)), nil
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset by peer") }

// clock is a manual clock for the LRU order.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

func open(t *testing.T, root string, max int64) *Cache {
	t.Helper()
	ck := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c, err := Open(Config{Root: root, MaxBytes: max, Now: ck.now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAcquireDownloadsOnceAndHits(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	c := open(t, root, 1<<20)
	b := newBucket(map[string]string{"train/a.txt": "alpha", "train/b.txt": "beta", "README": "hello", "empty/": ""})
	ds := b.dataset("nlp", "d1")
	var last [2]int64
	h, err := c.Acquire(context.Background(), ds, func(done, total int64) { last = [2]int64{done, total} })
	if err != nil {
		t.Fatal(err)
	}
	if h.Hit {
		t.Error("first acquire reported a hit")
	}
	if last != [2]int64{14, 14} {
		t.Errorf("last progress = %v, want [14 14]", last)
	}
	got, err := os.ReadFile(filepath.Join(h.Path, "train", "b.txt"))
	if err != nil || string(got) != "beta" {
		t.Fatalf("reading the entry: %q, %v", got, err)
	}
	reads := b.reads.Load()
	h2, err := c.Acquire(context.Background(), ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !h2.Hit || h2.Path != h.Path || b.reads.Load() != reads {
		t.Errorf("second acquire: hit=%v same path=%v reads %d→%d; want a hit with no reads", h2.Hit, h2.Path == h.Path, reads, b.reads.Load())
	}
	if diff := cmp.Diff([]string{"d1"}, c.Digests()); diff != "" {
		t.Errorf("Digests (-want +got):\n%s", diff)
	}
	// Another project's job with the same source gets its own entry.
	h3, err := c.Acquire(context.Background(), b.dataset("vision", "d1v"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if h3.Hit || h3.Path == h.Path {
		t.Errorf("another project shared the entry (hit=%v)", h3.Hit)
	}
	// A changed object (its ETag) makes a new entry.
	b.objects["README"] = []byte("hello again")
	h4, err := c.Acquire(context.Background(), b.dataset("nlp", "d1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if h4.Hit || h4.Path == h.Path {
		t.Errorf("a changed dataset hit the old entry")
	}
}

func TestEntriesAreReadOnlyAndUnlisted(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	c := open(t, root, 1<<20)
	h, err := c.Acquire(context.Background(), newBucket(map[string]string{"a/b.txt": "x"}).dataset("p", "d"), nil)
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]os.FileMode{
		root:                             0o711 | os.ModeDir,
		filepath.Join(root, dirEntries):  0o711 | os.ModeDir,
		filepath.Join(root, dirMeta):     0o700 | os.ModeDir,
		filepath.Join(root, dirTmp):      0o700 | os.ModeDir,
		filepath.Join(root, keyFile):     0o600,
		h.Path:                           0o555 | os.ModeDir,
		filepath.Join(h.Path, "a"):       0o555 | os.ModeDir,
		filepath.Join(h.Path, "a/b.txt"): 0o444,
	}
	for p, want := range modes {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
	}
	if len(filepath.Base(h.Path)) != 64 {
		t.Errorf("entry name %q is not a 256-bit keyed hash", filepath.Base(h.Path))
	}
}

func TestLRUEvictionUnderTheCap(t *testing.T) {
	t.Parallel()
	c := open(t, t.TempDir(), 100)
	ctx := context.Background()
	mk := func(name string) Dataset {
		return newBucket(map[string]string{"x": string(bytes.Repeat([]byte(name[:1]), 40))}).dataset("p", name)
	}
	a, b, d := mk("a"), mk("b"), mk("d")
	for _, ds := range []Dataset{a, b} {
		h, err := c.Acquire(ctx, ds, nil)
		if err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	// Use a again: b is now the least recently used.
	h, err := c.Acquire(ctx, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	h, err = c.Acquire(ctx, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	if diff := cmp.Diff([]string{"a", "d"}, c.Digests()); diff != "" {
		t.Errorf("after filling the cap (-want +got):\n%s", diff)
	}
	if s := c.Stats(); s.Bytes != 80 || s.Entries != 2 {
		t.Errorf("stats %+v, want 80 bytes in 2 entries", s)
	}
	if _, err := c.Acquire(ctx, newBucket(map[string]string{"x": string(bytes.Repeat([]byte("z"), 101))}).dataset("p", "z"), nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a dataset over the cap: %v, want ErrTooLarge", err)
	}
}

func TestPinnedEntriesAreNeverEvicted(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	c := open(t, root, 100)
	ctx := context.Background()
	big := func(name string) Dataset {
		return newBucket(map[string]string{"x": string(bytes.Repeat([]byte("x"), 60))}).dataset("p", name)
	}
	h, err := c.Acquire(ctx, big("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, big("b"), nil)
	if !errors.Is(err, ErrFull) {
		t.Fatalf("acquire while the only entry is pinned: %v, want ErrFull", err)
	}
	if _, err := os.Stat(h.Path); err != nil {
		t.Fatalf("the pinned entry is gone: %v", err)
	}
	h.Release()
	h.Release() // idempotent: must not unpin twice
	hb, err := c.Acquire(ctx, big("b"), nil)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	if _, err := os.Stat(h.Path); !os.IsNotExist(err) {
		t.Errorf("the released entry was not evicted: %v", err)
	}
	// After a restart the entry is pinned again by the adopted attempt.
	c2 := open(t, root, 100)
	p, ok := c2.Pin(hb.Name)
	if !ok {
		t.Fatal("Pin after reopening: no entry")
	}
	if _, err := c2.Acquire(ctx, big("c"), nil); !errors.Is(err, ErrFull) {
		t.Errorf("acquire over a re-pinned entry: %v, want ErrFull", err)
	}
	p.Release()
}

func TestConcurrentAcquiresDownloadOnce(t *testing.T) {
	t.Parallel()
	c := open(t, t.TempDir(), 1<<20)
	b := newBucket(map[string]string{"a": "aaaa", "b": "bbbb", "c": "cccc"})
	b.gate = make(chan struct{})
	ds := b.dataset("p", "d")
	const n = 8
	var wg sync.WaitGroup
	handles := make([]*Handle, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			handles[i], errs[i] = c.Acquire(context.Background(), ds, nil)
		}()
	}
	// The gate holds the download until every other caller waits on it.
	deadline := time.Now().Add(10 * time.Second)
	for waiting := int32(0); waiting != n-1; {
		c.mu.Lock()
		for _, f := range c.flights {
			waiting = f.waiters.Load()
		}
		c.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("%d callers wait on the download, want %d", waiting, n-1)
		}
		runtime.Gosched()
	}
	close(b.gate)
	wg.Wait()
	hits := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if handles[i].Hit {
			hits++
		}
	}
	if got := b.reads.Load(); got != 3 {
		t.Errorf("%d object reads for %d concurrent acquires, want 3 (one download)", got, n)
	}
	if hits != n-1 {
		t.Errorf("%d hits, want %d", hits, n-1)
	}
	for _, h := range handles {
		h.Release()
	}
	if s := c.Stats(); s.Pinned != 0 {
		t.Errorf("still pinned after every release: %+v", s)
	}
}

func TestPartialDownloadsNeverBecomeEntries(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	c := open(t, root, 1<<20)
	b := newBucket(map[string]string{"a": "aaaaaaaa", "b": "bbbbbbbb", "c": "cccccccc"})
	b.failAt = "b"
	_, err := c.Acquire(context.Background(), b.dataset("p", "d"), nil)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(`"b"`)) {
		t.Fatalf("a read failing mid-object: %v, want an error naming object \"b\"", err)
	}
	assertEmpty(t, c, root)

	// Cancelled mid-download.
	b.failAt = ""
	b.gate = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, err := c.Acquire(ctx, b.dataset("p", "d"), nil); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire: %v", err)
	}
	assertEmpty(t, c, root)

	// A crash: a download left in tmp and an entry renamed without its
	// record are both removed when the cache opens.
	if err := os.MkdirAll(filepath.Join(root, dirTmp, "x-123", "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	half := filepath.Join(root, dirEntries, "0123456789abcdef")
	if err := os.MkdirAll(half, 0o555); err != nil {
		t.Fatal(err)
	}
	c2 := open(t, root, 1<<20)
	assertEmpty(t, c2, root)
}

func assertEmpty(t *testing.T, c *Cache, root string) {
	t.Helper()
	if s := c.Stats(); s.Entries != 0 || s.Bytes != 0 {
		t.Errorf("stats %+v after a failed download, want empty", s)
	}
	for _, d := range []string{dirTmp, dirEntries, dirMeta} {
		if es, _ := os.ReadDir(filepath.Join(root, d)); len(es) != 0 {
			t.Errorf("%s holds %d files after a failed download", d, len(es))
		}
	}
}

func TestCorruptAndUnsafeObjectsAreNamed(t *testing.T) {
	t.Parallel()
	c := open(t, t.TempDir(), 1<<20)
	b := newBucket(map[string]string{"ok": "fine", "bad": "original"})
	ds := b.dataset("p", "d")
	b.objects["bad"] = []byte("tampered") // same size, other bytes: the ETag no longer matches
	_, err := c.Acquire(context.Background(), ds, nil)
	if !errors.Is(err, ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(`"bad"`)) {
		t.Errorf("tampered object: %v, want ErrCorrupt naming \"bad\"", err)
	}
	b.objects["bad"] = []byte("short")
	if _, err := c.Acquire(context.Background(), ds, nil); !errors.Is(err, ErrCorrupt) {
		t.Errorf("truncated object: %v, want ErrCorrupt", err)
	}
	for _, key := range []string{"../escape", "/abs", "a//b", "a/./b"} {
		evil := Dataset{Project: "p", Digest: "e", Source: "test://e", Objects: []objstore.Info{{Key: key, Size: 1}}, Open: b.open}
		if _, err := c.Acquire(context.Background(), evil, nil); !errors.Is(err, ErrUnsafeKey) {
			t.Errorf("key %q: %v, want ErrUnsafeKey", key, err)
		}
	}
}

func TestFullDiskIsNamed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	root := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", root).CombinedOutput(); err != nil {
		t.Skipf("mounting a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", root).Run() })
	c := open(t, root, 100<<20) // the cap allows it; the disk does not
	b := newBucket(map[string]string{"small": "x", "big": string(bytes.Repeat([]byte("y"), 2<<20))})
	_, err := c.Acquire(context.Background(), b.dataset("p", "d"), nil)
	if !errors.Is(err, ErrFull) || !bytes.Contains([]byte(err.Error()), []byte(`"big"`)) {
		t.Fatalf("full disk: %v, want ErrFull naming \"big\"", err)
	}
	assertEmpty(t, c, root)
}
