package ckptsync_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/objstore"
	"github.com/gpufleet/gpufleet/internal/s3test"
)

var dataKey = bytes.Repeat([]byte{7}, 32)

// backend is a store and the folder its raw bytes lie in.
type backend struct {
	store objstore.Store
	raw   string
}

func dirBackend(t *testing.T) backend {
	root := t.TempDir()
	d, err := objstore.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	return backend{d, root}
}

func s3Backend(t *testing.T) backend {
	srv := s3test.Start(t)
	raw := srv.CreateBucket(t, "ckpt")
	s, err := objstore.NewS3(s3Config(srv))
	if err != nil {
		t.Fatal(err)
	}
	return backend{s, raw}
}

func s3Config(srv *s3test.Server) objstore.S3Config {
	return objstore.S3Config{Endpoint: srv.Endpoint, Region: s3test.Region, Bucket: "ckpt", Prefix: "pool-a", PathStyle: true,
		AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey, PartSize: 5 << 20, MaxAttempts: 2}
}

func syncer(t *testing.T, st objstore.Store, dir string) *ckptsync.Syncer {
	t.Helper()
	sl, err := objstore.NewSealer(dataKey)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ckptsync.New(ckptsync.Config{Store: st, Sealer: sl, JobID: "job-secretname-1", Attempt: "a1", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// tree reads every file under dir.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if e.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			out[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	return out
}

func upload(t *testing.T, s *ckptsync.Syncer) ckptsync.Manifest {
	t.Helper()
	m, ok, err := s.Upload(context.Background())
	if err != nil || !ok {
		t.Fatalf("upload: ok %v, %v", ok, err)
	}
	return m
}

func TestRoundTrip(t *testing.T) {
	for name, mk := range map[string]func(*testing.T) backend{"dir": dirBackend, "s3": s3Backend} {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			a := t.TempDir()
			files := map[string]string{
				"model.pt":          "PLAINTEXT-WEIGHTS " + strings.Repeat("w", 3<<20),
				"optim/state.bin":   "PLAINTEXT-OPTIMIZER",
				ckptsync.Marker:     "step=1200 time=2026-12-01T10:00:00Z",
				".gpufleet-scratch": "not uploaded",
			}
			write(t, a, files)
			m := upload(t, syncer(t, b.store, a))
			if m.Step != 1200 || !m.Time.Equal(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)) || len(m.Files) != 3 {
				t.Errorf("manifest step %d time %v files %d, want 1200, 10:00, 3", m.Step, m.Time, len(m.Files))
			}
			// Another node restores it.
			bdir := t.TempDir()
			got, ok, err := syncer(t, b.store, bdir).Restore(context.Background())
			if err != nil || !ok || got.Step != 1200 {
				t.Fatalf("restore: step %d ok %v err %v", got.Step, ok, err)
			}
			delete(files, ".gpufleet-scratch")
			if d := cmp.Diff(files, tree(t, bdir)); d != "" {
				t.Errorf("restored folder (-want +got):\n%s", d)
			}
			// The bucket holds ciphertext under opaque names.
			assertSealed(t, b.raw, "PLAINTEXT", "model.pt", "optim", "job-secretname", "step=1200")
		})
	}
}

// assertSealed fails if any file name or content under raw contains one
// of words.
func assertSealed(t *testing.T, raw string, words ...string) {
	t.Helper()
	n := 0
	filepath.WalkDir(raw, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		for _, w := range words {
			if strings.Contains(p, w) {
				t.Errorf("bucket path %s reveals %q", p, w)
			}
		}
		if !e.Type().IsRegular() {
			return nil
		}
		n++
		b, _ := os.ReadFile(p)
		for _, w := range words {
			if bytes.Contains(b, []byte(w)) {
				t.Errorf("bucket file %s contains plaintext %q", p, w)
			}
		}
		return nil
	})
	if n == 0 {
		t.Errorf("no files under %s: nothing was checked", raw)
	}
}

func countObjects(t *testing.T, st objstore.Store, prefix string) int {
	n := 0
	if err := st.List(context.Background(), prefix, func(objstore.Info) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestUnchangedFilesAreNotUploadedAgain(t *testing.T) {
	t.Parallel()
	b := dirBackend(t)
	dir := t.TempDir()
	s := syncer(t, b.store, dir)
	write(t, dir, map[string]string{"base.bin": "frozen base", "head.bin": "v1", ckptsync.Marker: "1"})
	upload(t, s)
	objects := s.Prefix() + "o/"
	if n := countObjects(t, b.store, objects); n != 3 {
		t.Fatalf("%d objects after the first checkpoint, want 3", n)
	}
	if _, ok, err := s.Upload(context.Background()); ok || err != nil {
		t.Errorf("upload with an unchanged marker: uploaded %v, %v; want nothing", ok, err)
	}
	write(t, dir, map[string]string{"head.bin": "v2", ckptsync.Marker: "2"})
	// A fresh syncer (another attempt) finds base.bin stored already.
	m := upload(t, syncer(t, b.store, dir))
	if m.Step != 2 {
		t.Errorf("step %d, want 2", m.Step)
	}
	if n := countObjects(t, b.store, objects); n != 5 {
		t.Errorf("%d objects after the second checkpoint, want 5 (base.bin not again)", n)
	}
}

// cancelStore cancels the upload once it has read n bytes of objects.
type cancelStore struct {
	objstore.Store
	n      atomic.Int64
	cancel func()
}

func (c *cancelStore) Put(ctx context.Context, key string, r io.Reader, size int64) (objstore.Info, error) {
	return c.Store.Put(ctx, key, &countingReader{r: r, s: c}, size)
}

type countingReader struct {
	r io.Reader
	s *cancelStore
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.s.n.Add(-int64(len(p))) < 0 {
		c.s.cancel()
	}
	return c.r.Read(p)
}

func TestCancelledUploadLeavesPreviousLatest(t *testing.T) {
	for name, mk := range map[string]func(*testing.T) backend{"dir": dirBackend, "s3": s3Backend} {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			dir := t.TempDir()
			write(t, dir, map[string]string{"model.pt": "first", ckptsync.Marker: "step=10"})
			upload(t, syncer(t, b.store, dir))

			big := make([]byte, 12<<20)
			rand.Read(big)
			write(t, dir, map[string]string{"model.pt": string(big), ckptsync.Marker: "step=20"})
			ctx, cancel := context.WithCancel(context.Background())
			cs := &cancelStore{Store: b.store, cancel: cancel}
			cs.n.Store(6 << 20)
			if _, _, err := syncer(t, cs, dir).Upload(ctx); err == nil {
				t.Fatal("upload cancelled midway succeeded")
			}
			restoreStep(t, b.store, 10, "first")
		})
	}
}

// restoreStep restores into a fresh folder and wants step and model.pt.
func restoreStep(t *testing.T, st objstore.Store, step int64, model string) {
	t.Helper()
	dir := t.TempDir()
	m, ok, err := syncer(t, st, dir).Restore(context.Background())
	if err != nil || !ok || m.Step != step {
		t.Fatalf("restore: step %d ok %v err %v, want step %d", m.Step, ok, err, step)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "model.pt")); string(got) != model {
		t.Errorf("restored model.pt is %d bytes, want %q", len(got), model)
	}
}

func TestCorruptObjectIsNamedAndNothingIsRestored(t *testing.T) {
	t.Parallel()
	b := dirBackend(t)
	src := t.TempDir()
	write(t, src, map[string]string{"model.pt": strings.Repeat("x", 5000), ckptsync.Marker: "7"})
	s := syncer(t, b.store, src)
	m := upload(t, s)
	var obj string
	for _, f := range m.Files {
		if f.Path == "model.pt" {
			obj = s.Prefix() + "o/" + f.Object
		}
	}
	raw := filepath.Join(b.raw, filepath.FromSlash(obj))
	data, err := os.ReadFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	data[100] ^= 0xff
	os.WriteFile(raw, data, 0o600)

	dst := t.TempDir()
	_, _, err = syncer(t, b.store, dst).Restore(context.Background())
	if !errors.Is(err, objstore.ErrCorrupt) || !strings.Contains(err.Error(), obj) || !strings.Contains(err.Error(), "model.pt") {
		t.Errorf("restore of a corrupt object: %v; want ErrCorrupt naming %s and model.pt", err, obj)
	}
	if got := tree(t, dst); len(got) != 0 {
		t.Errorf("a failed restore left files: %v", got)
	}
}

func TestMissingCheckpointIsNotAnError(t *testing.T) {
	t.Parallel()
	b := dirBackend(t)
	_, ok, err := syncer(t, b.store, t.TempDir()).Restore(context.Background())
	if ok || err != nil {
		t.Errorf("restore with no checkpoint: ok %v, %v; want false, nil", ok, err)
	}
}

func TestStorageFaultsAreNamed(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "ckpt")
	dir := t.TempDir()
	write(t, dir, map[string]string{"model.pt": "w", ckptsync.Marker: "1"})
	for name, tc := range map[string]struct {
		mod  func(*objstore.S3Config)
		want error
	}{
		"wrong credentials": {func(c *objstore.S3Config) { c.SecretAccessKey = "nope-nope-nope" }, objstore.ErrAccessDenied},
		"missing bucket":    {func(c *objstore.S3Config) { c.Bucket = "gone" }, objstore.ErrNoBucket},
		"unreachable":       {func(c *objstore.S3Config) { c.Endpoint = "http://127.0.0.1:1" }, objstore.ErrUnreachable},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := s3Config(srv)
			cfg.MaxAttempts = 1
			tc.mod(&cfg)
			st, _ := objstore.NewS3(cfg)
			s := syncer(t, st, dir)
			if _, _, err := s.Upload(context.Background()); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), s.Prefix()) {
				t.Errorf("upload: %v, want %v naming the object", err, tc.want)
			}
			if _, _, err := s.Restore(context.Background()); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), s.Prefix()+"latest") {
				t.Errorf("restore: %v, want %v naming the object", err, tc.want)
			}
		})
	}
}

// TestKilledUploaderLeavesPreviousLatest SIGKILLs a process in the middle
// of uploading a checkpoint to versitygw: the previous checkpoint stays
// latest and restores whole.
func TestKilledUploaderLeavesPreviousLatest(t *testing.T) {
	if os.Getenv("CKPTSYNC_CHILD_DIR") != "" {
		return // run by the parent below
	}
	srv := s3test.Start(t)
	srv.CreateBucket(t, "ckpt")
	st, _ := objstore.NewS3(s3Config(srv))
	dir := t.TempDir()
	write(t, dir, map[string]string{"model.pt": "first", ckptsync.Marker: "step=10"})
	upload(t, syncer(t, st, dir))
	big := make([]byte, 64<<20)
	rand.Read(big)
	write(t, dir, map[string]string{"model.pt": string(big), ckptsync.Marker: "step=20"})

	cmd := exec.Command(os.Args[0], "-test.run=^TestUploaderChild$", "-test.v")
	cmd.Env = append(os.Environ(), "CKPTSYNC_CHILD_DIR="+dir, "CKPTSYNC_CHILD_ENDPOINT="+srv.Endpoint)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it once it has sent some of the file (throttled to 16 MB/s:
	// about 4 s for the whole of it).
	buf := make([]byte, 4096)
	var seen string
	for !strings.Contains(seen, "CHILD-SENDING") {
		n, err := out.Read(buf)
		if err != nil {
			t.Fatalf("child ended before it sent: %q", seen)
		}
		seen += string(buf[:n])
	}
	time.Sleep(700 * time.Millisecond)
	cmd.Process.Kill()
	rest, _ := io.ReadAll(out)
	cmd.Wait()
	if strings.Contains(seen+string(rest), "CHILD-DONE") {
		t.Fatal("the child finished its upload before it was killed: nothing was tested")
	}
	restoreStep(t, st, 10, "first")
	// And a later upload succeeds over what the killed one left.
	m := upload(t, syncer(t, st, dir))
	if m.Step != 20 {
		t.Errorf("upload after the kill: step %d, want 20", m.Step)
	}
	restoreStep(t, st, 20, string(big))
}

// TestUploaderChild is the process TestKilledUploaderLeavesPreviousLatest
// kills.
func TestUploaderChild(t *testing.T) {
	dir := os.Getenv("CKPTSYNC_CHILD_DIR")
	if dir == "" {
		t.Skip("run by TestKilledUploaderLeavesPreviousLatest")
	}
	cfg := objstore.S3Config{Endpoint: os.Getenv("CKPTSYNC_CHILD_ENDPOINT"), Region: s3test.Region, Bucket: "ckpt", Prefix: "pool-a",
		PathStyle: true, AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey, PartSize: 5 << 20, MaxAttempts: 2, Concurrency: 1}
	st, _ := objstore.NewS3(cfg)
	s := syncer(t, &slowStore{Store: st}, dir)
	_, _, err := s.Upload(context.Background())
	fmt.Printf("CHILD-DONE %v\n", err)
}

// slowStore throttles the bytes it puts to 16 MB/s.
type slowStore struct{ objstore.Store }

func (s *slowStore) Put(ctx context.Context, key string, r io.Reader, size int64) (objstore.Info, error) {
	if size > 1<<20 {
		fmt.Println("CHILD-SENDING")
		os.Stdout.Sync()
	}
	return s.Store.Put(ctx, key, &slowReader{r: r}, size)
}

type slowReader struct{ r io.Reader }

func (s *slowReader) Read(p []byte) (int, error) {
	if len(p) > 64<<10 {
		p = p[:64<<10]
	}
	time.Sleep(4 * time.Millisecond) // 64 KiB per 4 ms
	return s.r.Read(p)
}

// TestLinksOutOfTheFolderAreNotFollowed: a job cannot make the agent upload
// a file outside its checkpoint folder by linking to it.
func TestLinksOutOfTheFolderAreNotFollowed(t *testing.T) {
	t.Parallel()
	b := dirBackend(t)
	outside := filepath.Join(t.TempDir(), "host-secret")
	write(t, filepath.Dir(outside), map[string]string{"host-secret": "HOST-ONLY"})
	dir := t.TempDir()
	write(t, dir, map[string]string{"model.pt": "w", ckptsync.Marker: "3"})
	os.Symlink(outside, filepath.Join(dir, "stolen"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o700)
	os.Symlink(filepath.Dir(outside), filepath.Join(dir, "sub", "escape"))
	m := upload(t, syncer(t, b.store, dir))
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path)
	}
	if d := cmp.Diff([]string{ckptsync.Marker, "model.pt"}, paths); d != "" {
		t.Errorf("uploaded files (-want +got):\n%s", d)
	}
	// A marker that is a link out of the folder is no marker.
	dir2 := t.TempDir()
	write(t, dir2, map[string]string{"model.pt": "w"})
	os.Symlink(outside, filepath.Join(dir2, ckptsync.Marker))
	if _, ok, err := syncer(t, b.store, dir2).Upload(context.Background()); ok || err == nil {
		t.Errorf("upload with a linked marker: uploaded %v, %v; want an error", ok, err)
	}
}

// TestRestoreOntoAFullDisk: a checkpoint larger than the node's free space
// fails with the file named and no space error hidden, and leaves nothing
// in place (no LATEST the job would trust).
func TestRestoreOntoAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	b := dirBackend(t)
	src := t.TempDir()
	big := make([]byte, 3<<20)
	rand.Read(big)
	write(t, src, map[string]string{"model.pt": string(big), ckptsync.Marker: "step=5"})
	upload(t, syncer(t, b.store, src))

	small := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", small).CombinedOutput(); err != nil {
		t.Skipf("mounting a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", small).Run() })
	_, _, err := syncer(t, b.store, small).Restore(context.Background())
	if err == nil || !strings.Contains(err.Error(), "model.pt") || !strings.Contains(err.Error(), "no space left") {
		t.Errorf("restore onto a full disk: %v; want the file and the space error", err)
	}
	if got := tree(t, small); len(got) != 0 {
		t.Errorf("a failed restore left files: %v", got)
	}
}

// TestOlderAttemptDoesNotReplaceNewerLatest: a node still running attempt 1
// after attempt 2 started elsewhere cannot make its checkpoint latest.
func TestOlderAttemptDoesNotReplaceNewerLatest(t *testing.T) {
	t.Parallel()
	b := dirBackend(t)
	sl, _ := objstore.NewSealer(dataKey)
	attempt := func(n int, dir string) *ckptsync.Syncer {
		s, err := ckptsync.New(ckptsync.Config{Store: b.store, Sealer: sl, JobID: "job-1", Attempt: fmt.Sprintf("a%d", n), AttemptNumber: n, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	old, cur := t.TempDir(), t.TempDir()
	write(t, cur, map[string]string{"model.pt": "new", ckptsync.Marker: "step=50"})
	upload(t, attempt(2, cur))
	write(t, old, map[string]string{"model.pt": "stale", ckptsync.Marker: "step=60"})
	if _, ok, err := attempt(1, old).Upload(context.Background()); ok || !errors.Is(err, ckptsync.ErrSuperseded) {
		t.Errorf("attempt 1 after attempt 2: uploaded %v, %v; want ErrSuperseded", ok, err)
	}
	if m, _, _ := attempt(3, t.TempDir()).Latest(context.Background()); m.Step != 50 || m.AttemptNumber != 2 {
		t.Errorf("latest is step %d of attempt %d, want 50 of 2", m.Step, m.AttemptNumber)
	}
}

// putCounter counts the objects (not manifests) a store is sent.
type putCounter struct {
	objstore.Store
	puts atomic.Int64
}

func (p *putCounter) Put(ctx context.Context, key string, r io.Reader, size int64) (objstore.Info, error) {
	if strings.Contains(key, "/o/") {
		p.puts.Add(1)
	}
	return p.Store.Put(ctx, key, r, size)
}

// TestOldUnreferencedObjectsAreSentAgain: an upload names an object found
// in the store without sending it only when the object is recent or is the
// latest checkpoint's; an older one may be garbage being collected
// (package artifacts), so its content is sent again.
func TestOldUnreferencedObjectsAreSentAgain(t *testing.T) {
	t.Parallel()
	b := dirBackend(t)
	pc := &putCounter{Store: b.store}
	sl, _ := objstore.NewSealer(dataKey)
	fc := clock.NewFake(time.Now())
	dir := t.TempDir()
	newSyncer := func() *ckptsync.Syncer {
		s, err := ckptsync.New(ckptsync.Config{Store: pc, Sealer: sl, JobID: "j", Attempt: "a", Dir: dir, Clock: fc})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	write(t, dir, map[string]string{"base.bin": "base", "head.bin": "v1", ckptsync.Marker: "1"})
	upload(t, newSyncer())
	write(t, dir, map[string]string{"head.bin": "v2", ckptsync.Marker: "2"})
	// Another attempt, soon after: base.bin is found stored and recent.
	pc.puts.Store(0)
	upload(t, newSyncer())
	if n := pc.puts.Load(); n != 2 {
		t.Errorf("recent objects: %d sent, want 2 (head.bin and LATEST)", n)
	}
	// Another attempt, much later, that did not restore: base.bin is old
	// and not known to be the latest's, so it is sent again.
	fc.Advance(ckptsync.ReuseWindow + time.Minute)
	write(t, dir, map[string]string{"head.bin": "v3", ckptsync.Marker: "3"})
	pc.puts.Store(0)
	s := newSyncer()
	upload(t, s)
	if n := pc.puts.Load(); n != 3 {
		t.Errorf("old objects: %d sent, want 3 (base.bin again)", n)
	}
	// The same syncer's next checkpoint names the latest's objects
	// without looking, however old.
	fc.Advance(ckptsync.ReuseWindow + time.Minute)
	write(t, dir, map[string]string{"head.bin": "v4", ckptsync.Marker: "4"})
	pc.puts.Store(0)
	upload(t, s)
	if n := pc.puts.Load(); n != 2 {
		t.Errorf("the latest's objects: %d sent, want 2", n)
	}
}

// TestAdopt: a syncer that adopts a folder restored by another process
// sends nothing for the restored checkpoint, and uploads a newer one.
func TestAdopt(t *testing.T) {
	b := dirBackend(t)
	src, dst := t.TempDir(), t.TempDir()
	write(t, src, map[string]string{"model.pt": "v1", ckptsync.Marker: "step=1"})
	if _, ok, err := syncer(t, b.store, src).Upload(context.Background()); err != nil || !ok {
		t.Fatalf("upload: %v %v", ok, err)
	}
	if _, ok, err := syncer(t, b.store, dst).Restore(context.Background()); err != nil || !ok {
		t.Fatalf("restore: %v %v", ok, err)
	}
	s := syncer(t, b.store, dst)
	if err := s.Adopt(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, uploaded, err := s.Upload(context.Background()); err != nil || uploaded {
		t.Errorf("upload after adopting the restored checkpoint: uploaded %v, %v; want nothing sent", uploaded, err)
	}
	write(t, dst, map[string]string{"model.pt": "v2", ckptsync.Marker: "step=2"})
	if m, uploaded, err := s.Upload(context.Background()); err != nil || !uploaded || m.Step != 2 {
		t.Errorf("upload of step 2: %v %v %v", m.Step, uploaded, err)
	}
	// A folder whose marker is not latest's (written before the adopt) is
	// uploaded, not taken as stored.
	other := t.TempDir()
	write(t, other, map[string]string{"model.pt": "v3", ckptsync.Marker: "step=3"})
	s3 := syncer(t, b.store, other)
	if err := s3.Adopt(context.Background()); err != nil {
		t.Fatal(err)
	}
	if m, uploaded, err := s3.Upload(context.Background()); err != nil || !uploaded || m.Step != 3 {
		t.Errorf("upload of a newer folder after adopt: %v %v %v", m.Step, uploaded, err)
	}
}
