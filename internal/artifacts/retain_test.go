package artifacts_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/artifacts"
	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/objstore"
)

// counter counts the catalogue's S3 requests by kind (LIST, HEAD, GET,
// PUT, DELETE) as they go over HTTP to the server.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	op := r.Method
	if r.Method == http.MethodGet && r.URL.Query().Has("list-type") {
		op = "LIST"
	}
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

// take returns the counts since the last take.
func (c *counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// counting makes the catalogue open its storages through c.
func counting(c *counter) func(*artifacts.Config) {
	return func(cfg *artifacts.Config) {
		cfg.Open = func(_ context.Context, s model.Storage, cr objstore.Credentials) (objstore.Store, error) {
			return objstore.NewS3(objstore.S3Config{Endpoint: s.S3.Endpoint, Bucket: s.S3.Bucket, Prefix: s.S3.Prefix, PathStyle: s.S3.PathStyle,
				AccessKeyID: cr.AccessKeyID, SecretAccessKey: cr.SecretAccessKey, HTTPClient: &http.Client{Transport: c}})
		}
	}
}

func (e *env) round(t *testing.T) artifacts.Report {
	t.Helper()
	rep, err := e.cat.Retain(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestSteadyRoundReadsOnlyWhatChanged: a new leader's first round reads
// every folder from one listing of the storage; after it, a round lists nothing
// that did not change: the same requests with 10 or 40 ended jobs'
// checkpoints stored, one LIST for a job that checkpointed and one for an
// artefact pushed.
func TestSteadyRoundReadsOnlyWhatChanged(t *testing.T) {
	steady := map[int]string{}
	for _, jobs := range []int{10, 40} {
		c := &counter{n: map[string]int{}}
		e := newEnvWith(t, func(cfg *artifacts.Config) { counting(c)(cfg); cfg.SweepKeys = 50 })
		e.fleet.projects = []*model.Project{{Name: "vision", Spec: model.ProjectSpec{Artifacts: &model.ArtifactPolicy{KeepCheckpoints: 2, KeepVersions: 2}}}}
		for i := range jobs {
			id := fmt.Sprintf("j-done-%02d", i)
			e.fleet.jobs[id] = &model.Job{ID: id, Project: "vision", State: model.JobSucceeded}
			for step := 1; step <= 3; step++ {
				e.checkpoint(t, "vision", id, step, map[string]string{"base.bin": "base " + id, "opt.pt": fmt.Sprintf("%s step %d", id, step)})
			}
		}
		e.push(t, "vision", "gpt", map[string]string{"w": "v1"})
		// A new leader: a catalogue that changed nothing yet (a push through
		// this one before its first round is listed on its own).
		cfg := artifacts.Config{Fleet: e.fleet, Keys: e.fleet, Clock: e.clock, SweepKeys: 50}
		counting(c)(&cfg)
		cat, err := artifacts.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		e.cat = cat
		c.take()

		first := e.round(t)
		if first.Manifests != jobs || first.Read != jobs+1 {
			t.Errorf("%d jobs: first round %+v, want %d checkpoints removed and %d folders read", jobs, first, jobs, jobs+1)
		}
		boot := c.take()
		if boot["LIST"] != 2 {
			t.Errorf("%d jobs: the first round made %d LISTs, want 2 (the storage listed once for every folder, a page of the walk)", jobs, boot["LIST"])
		}
		// The walk over the storage goes on a page per round, to its end.
		for r := 0; ; r++ {
			if r > 100 {
				t.Fatal("collection's walk never ended")
			}
			rep := e.round(t)
			if n := c.take()["LIST"]; n != 1 {
				t.Errorf("%d jobs: a round of the walk made %d LISTs, want 1 (a page of %d keys)", jobs, n, 50)
			}
			if rep.Sweeps == 1 {
				break
			}
		}

		quiet := e.round(t)
		q := c.take()
		e.checkpoint(t, "vision", "j-train", 1, map[string]string{"opt.pt": "running 1"})
		e.push(t, "vision", "gpt", map[string]string{"w": "v2"})
		c.take()
		changed := e.round(t)
		ch := c.take()
		if quiet.Read != 0 || q["LIST"] != 0 {
			t.Errorf("%d jobs: a round with nothing changed read %d folders with %d LISTs, want none", jobs, quiet.Read, q["LIST"])
		}
		if changed.Read != 2 || ch["LIST"] != 2 {
			t.Errorf("%d jobs: a round after a checkpoint and a push read %d folders with %d LISTs, want 2 and 2", jobs, changed.Read, ch["LIST"])
		}
		steady[jobs] = fmt.Sprintf("quiet %v, changed %v", q, ch)
		t.Logf("%d jobs (%d keys at first): first round %v; %s", jobs, jobs*9+3, boot, steady[jobs])
	}
	if steady[10] != steady[40] {
		t.Errorf("steady rounds differ with the stored history's size:\n10 jobs: %s\n40 jobs: %s", steady[10], steady[40])
	}
}

// rawFiles lists the bucket's object files (versitygw's posix backend:
// one file per object).
func rawFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// age makes every stored object look written 48 h ago (versitygw gives a
// file's modification time as the object's).
func age(t *testing.T, root string) {
	t.Helper()
	old := time.Now().Add(-48 * time.Hour)
	for _, p := range rawFiles(t, root) {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPushesRacingRoundsLoseNothing: pushes and checkpoints that need
// again content that retention just left unnamed (and old enough to
// collect) run against back-to-back rounds whose collection walk
// restarts at once; afterwards every version and checkpoint the catalogue
// lists reads back verified, and the job restores its latest.
func TestPushesRacingRoundsLoseNothing(t *testing.T) {
	e := newEnvWith(t, func(cfg *artifacts.Config) { cfg.SweepKeys = 7; cfg.SweepEvery = time.Nanosecond })
	// The catalogue's clock runs with the objects' (real) times.
	e.clock.Set(time.Now())
	e.fleet.projects = []*model.Project{{Name: "vision", Spec: model.ProjectSpec{Artifacts: &model.ArtifactPolicy{KeepCheckpoints: 1, KeepVersions: 1}}}}
	ctx := context.Background()
	const pool = 12
	content := func(i int) string { return fmt.Sprintf("shard %d of the pool", i%pool) }
	key, _ := e.fleet.DataKey("vision")
	sl, _ := objstore.NewSealer(key)
	dir := t.TempDir()
	ck, err := ckptsync.New(ckptsync.Config{Store: e.store, Sealer: sl, JobID: "j-train", Attempt: "a", AttemptNumber: 1, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	checkpoint := func(step int) error {
		for name, c := range map[string]string{"opt.pt": content(step), "extra.pt": content(step + 5), ckptsync.Marker: fmt.Sprintf("step=%d", step)} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(c), 0o600); err != nil {
				return err
			}
		}
		_, _, err := ck.Upload(ctx)
		return err
	}
	push := func(i int) error {
		p := model.ArtifactPush{}
		files := map[string]string{"w": content(i), "v": content(i + 7)}
		for path, c := range files {
			sum := sha256.Sum256([]byte(c))
			p.Files = append(p.Files, model.ArtifactFile{Path: path, Size: int64(len(c)), SHA256: hex.EncodeToString(sum[:])})
		}
		for try := 0; ; try++ {
			_, missing, err := e.cat.Commit(ctx, "vision", "gpt", p)
			if err != nil || len(missing) == 0 {
				return err
			}
			if try == 5 {
				return fmt.Errorf("push %d: still missing %v", i, missing)
			}
			for _, m := range missing {
				for _, c := range files {
					if s := sha256.Sum256([]byte(c)); hex.EncodeToString(s[:]) == m {
						if err := e.cat.PutObject(ctx, "vision", "gpt", m, int64(len(c)), strings.NewReader(c)); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	// Every piece of content stored once, then made old enough to collect.
	for i := range pool {
		if err := checkpoint(i); err != nil {
			t.Fatal(err)
		}
		if err := push(i); err != nil {
			t.Fatal(err)
		}
	}
	age(t, e.raw)

	var stop atomic.Bool
	var wg sync.WaitGroup
	var collected atomic.Int64
	errc := make(chan error, 3)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			rep, err := e.cat.Retain(ctx)
			if err != nil {
				errc <- fmt.Errorf("round: %w", err)
				return
			}
			collected.Add(int64(rep.Objects))
		}
	}()
	var writers sync.WaitGroup
	for _, w := range []func(int) error{checkpoint, push} {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := pool; i < 4*pool; i++ {
				if err := w(i); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	writers.Wait()
	stop.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if collected.Load() == 0 {
		t.Fatal("no object was collected during the race: the test did not race anything")
	}
	// One more round settles retention; then everything listed must read.
	e.round(t)
	list, err := e.cat.List(ctx, "vision", model.ArtifactFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list {
		r := artifacts.Ref{Name: a.Name, Version: a.Version}
		if a.Kind == model.ArtifactCheckpoint {
			r = artifacts.Ref{Job: a.Job, Version: fmt.Sprint(a.Step)}
		}
		full, err := e.cat.Get(ctx, "vision", r)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		for _, f := range full.Files {
			_, _, rc, err := e.cat.Open(ctx, "vision", r, f.Path)
			if err == nil {
				_, err = io.Copy(io.Discard, rc)
				rc.Close()
			}
			if err != nil {
				t.Errorf("%s %s after the race: %v", r, f.Path, err)
			}
		}
	}
	s, _ := ckptsync.New(ckptsync.Config{Store: e.store, Sealer: sl, JobID: "j-train", Dir: t.TempDir()})
	if m, ok, err := s.Restore(ctx); err != nil || !ok || m.Step != 4*pool-1 {
		t.Errorf("restore after the race: step %d %v %v", m.Step, ok, err)
	}
	t.Logf("%d artefacts listed, %d objects collected during the race", len(list), collected.Load())
}

// abandon is a store whose Puts fail after n, as an uploader killed
// mid-way leaves things: some objects stored, no manifest.
type abandon struct {
	objstore.Store
	n atomic.Int64
}

func (a *abandon) Put(ctx context.Context, key string, r io.Reader, size int64) (objstore.Info, error) {
	if a.n.Add(-1) < 0 {
		return objstore.Info{}, fmt.Errorf("uploader killed")
	}
	return a.Store.Put(ctx, key, r, size)
}

// TestAbandonedUploadCollectedAfterGrace: objects an uploader stored
// before dying (no manifest names them) stay while within the grace
// period, and go with the walk once it has passed; the checkpoint before
// stays latest and restores.
func TestAbandonedUploadCollectedAfterGrace(t *testing.T) {
	e := newEnvWith(t, func(cfg *artifacts.Config) { cfg.SweepKeys = 3; cfg.SweepEvery = time.Hour })
	ctx := context.Background()
	e.checkpoint(t, "vision", "j-train", 1, map[string]string{"opt.pt": "good state"})
	before := len(rawFiles(t, e.raw))
	key, _ := e.fleet.DataKey("vision")
	sl, _ := objstore.NewSealer(key)
	dir := t.TempDir()
	for name, c := range map[string]string{"opt.pt": "torn 1", "a.pt": "torn 2", "b.pt": "torn 3", ckptsync.Marker: "step=2"} {
		os.WriteFile(filepath.Join(dir, name), []byte(c), 0o600)
	}
	ab := &abandon{Store: e.store}
	ab.n.Store(2)
	s, _ := ckptsync.New(ckptsync.Config{Store: ab, Sealer: sl, JobID: "j-train", Attempt: "b", AttemptNumber: 2, Dir: dir})
	if _, _, err := s.Upload(ctx); err == nil {
		t.Fatal("the abandoned upload succeeded")
	}
	torn := len(rawFiles(t, e.raw)) - before
	if torn != 2 {
		t.Fatalf("the abandoned upload left %d objects, want 2", torn)
	}
	drive := func() artifacts.Report { // rounds until the walk ends
		var total artifacts.Report
		for r := 0; r < 50; r++ {
			rep := e.round(t)
			total.Objects += rep.Objects
			if rep.Sweeps > 0 {
				return total
			}
		}
		t.Fatal("the walk never ended")
		return total
	}
	if rep := drive(); rep.Objects != 0 {
		t.Errorf("collected %d objects within grace", rep.Objects)
	}
	e.clock.Advance(23 * time.Hour)
	if rep := drive(); rep.Objects != 0 {
		t.Errorf("collected %d objects 23 h on (grace 24 h)", rep.Objects)
	}
	e.clock.Advance(2 * time.Hour)
	if rep := drive(); rep.Objects != torn {
		t.Errorf("collected %d objects past grace, want the %d the upload left", rep.Objects, torn)
	}
	if n := len(rawFiles(t, e.raw)); n != before {
		t.Errorf("%d files in the bucket, want the %d before the abandoned upload", n, before)
	}
	r, _ := ckptsync.New(ckptsync.Config{Store: e.store, Sealer: sl, JobID: "j-train", Dir: t.TempDir()})
	if m, ok, err := r.Restore(ctx); err != nil || !ok || m.Step != 1 {
		t.Errorf("restore: step %d %v %v, want step 1", m.Step, ok, err)
	}
}

// hooked runs hook once, when the catalogue looks at key (a Stat, or the
// collection walk's listing reaching it), or (onStorage) right after the
// first round's listing of the whole storage, before the catalogue acts on
// what it saw: the moment an uploader could write the object again.
type hooked struct {
	objstore.Store
	key                       string
	onStat, onList, onStorage bool
	once                      sync.Once
	hook                      func()
}

func (h *hooked) List(ctx context.Context, prefix string, fn func(objstore.Info) bool) error {
	err := h.Store.List(ctx, prefix, fn)
	if h.onStorage && prefix == "" {
		h.once.Do(h.hook)
	}
	return err
}

func (h *hooked) Stat(ctx context.Context, key string) (objstore.Info, error) {
	i, err := h.Store.Stat(ctx, key)
	if h.onStat && key == h.key {
		h.once.Do(h.hook)
	}
	return i, err
}

func (h *hooked) ListAfter(ctx context.Context, prefix, after string, limit int, fn func(objstore.Info) bool) (bool, error) {
	return objstore.ListAfter(ctx, h.Store, prefix, after, limit, func(i objstore.Info) bool {
		if h.onList && i.Key == h.key {
			h.once.Do(h.hook)
		}
		return fn(i)
	})
}

func (h *hooked) DeleteIfMatch(ctx context.Context, key, etag string) (bool, error) {
	return objstore.DeleteIfMatch(ctx, h.Store, key, etag)
}

// TestCollectorSparesAnObjectWrittenAgain: an object retention left
// unnamed, old enough to collect, is written again by an upload (which
// found it too old to reuse) and named by its new checkpoint between the
// collector's look and its delete. The delete, conditional on what the
// collector saw, leaves it: the new checkpoint restores. Both paths: the
// objects retention queued (a HEAD, then the delete) and the walk (after
// a restart lost the queue).
func TestCollectorSparesAnObjectWrittenAgain(t *testing.T) {
	for _, path := range []string{"queued", "walk"} {
		t.Run(path, func(t *testing.T) {
			h := &hooked{onStat: path == "queued"}
			e := newEnvWith(t, h.opens)
			e.clock.Set(time.Now())
			e.fleet.projects = []*model.Project{{Name: "vision", Spec: model.ProjectSpec{Artifacts: &model.ArtifactPolicy{KeepCheckpoints: 1}}}}
			ctx := context.Background()
			for step, c := range []string{"A", "B", "C"} {
				e.checkpoint(t, "vision", "j-train", step+1, map[string]string{"opt.pt": c})
			}
			key, _ := e.fleet.DataKey("vision")
			sl, _ := objstore.NewSealer(key)
			sum := sha256.Sum256([]byte("A"))
			h.key = ckptsync.ObjectKey(ckptsync.JobPrefix(sl, "j-train"), sl.Name(sum[:]))
			h.hook = func() {
				e.checkpoint(t, "vision", "j-train", 4, map[string]string{"opt.pt": "A"})
			}
			if path == "walk" {
				e.round(t) // retention drops steps 1 and 2 (A, B are young: queued)
				age(t, e.raw)
				// A restart: the queue is lost; the walk finds A and B.
				cat, err := artifacts.New(artifacts.Config{Fleet: e.fleet, Keys: e.fleet, Clock: e.clock, Open: func(context.Context, model.Storage, objstore.Credentials) (objstore.Store, error) {
					return h, nil
				}})
				if err != nil {
					t.Fatal(err)
				}
				e.cat = cat
				h.onList = true
			} else {
				age(t, e.raw)
			}
			var rep artifacts.Report
			for r := 0; r < 5; r++ {
				x := e.round(t)
				rep.Objects += x.Objects
			}
			if rep.Objects == 0 {
				t.Error("nothing collected: B was old and unnamed")
			}
			s, _ := ckptsync.New(ckptsync.Config{Store: e.store, Sealer: sl, JobID: "j-train", Dir: t.TempDir()})
			if m, ok, err := s.Restore(ctx); err != nil || !ok || m.Step != 4 {
				t.Errorf("restore of the checkpoint naming A again: step %d %v %v", m.Step, ok, err)
			}
		})
	}
}

// TestBootListingRacesCommit: a new leader's first round lists the
// storage once, in the round of the first project to reach it (nlp). A
// push to another project on that storage (vision) commits after that
// listing but before vision's records are built, naming old content that,
// in the listing, only a version retention drops named. Vision's round
// lists that artefact afresh: the new version counts among the kept ones
// and reads back, and only the content no kept version names is collected.
func TestBootListingRacesCommit(t *testing.T) {
	h := &hooked{onStorage: true}
	e := newEnvWith(t, h.opens)
	e.clock.Set(time.Now())
	e.fleet.projects = []*model.Project{{Name: "vision", Spec: model.ProjectSpec{Artifacts: &model.ArtifactPolicy{KeepVersions: 2}}}, {Name: "nlp"}}
	if _, err := e.fleet.DataKey("nlp"); err != nil { // nlp sorts first: its round lists the storage
		t.Fatal(err)
	}
	for _, c := range []string{"X", "Y", "Z"} {
		e.push(t, "vision", "gpt", map[string]string{"w": c})
	}
	age(t, e.raw) // X, Y, Z are past the grace period
	ctx := context.Background()
	sum := sha256.Sum256([]byte("X"))
	again := model.ArtifactPush{Files: []model.ArtifactFile{{Path: "w", Size: 1, SHA256: hex.EncodeToString(sum[:]), Mode: 0o644}}}
	var v4 *model.Artifact
	var pushErr error
	h.hook = func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			var missing []string
			// X is named by the first version: the commit reuses it.
			v4, missing, pushErr = e.cat.Commit(ctx, "vision", "gpt", again)
			if pushErr == nil && v4 == nil {
				pushErr = fmt.Errorf("the commit asked for %v, want X reused", missing)
			}
		}()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("the commit waited for the round: the storage was listed under vision's lock, so this does not race")
		}
	}
	rep := e.round(t)
	if pushErr != nil {
		t.Fatal(pushErr)
	}
	if v4 == nil {
		t.Fatal("the round never listed the whole storage: nothing raced")
	}
	if rep.Manifests != 2 || rep.Objects != 1 {
		t.Errorf("round %+v, want the 2 versions beyond the newest 2 removed and Y (named by neither kept) collected", rep)
	}
	list, err := e.cat.List(ctx, "vision", model.ArtifactFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range list {
		c, err := e.read("vision", artifacts.Ref{Name: a.Name, Version: a.Version}, "w")
		if err != nil {
			t.Fatalf("version %s lost its content (%s was pushed during the round): %v", a.Version, v4.Version, err)
		}
		got = append(got, c)
	}
	if strings.Join(got, ",") != "X,Z" {
		t.Errorf("kept versions hold %v, want X (the one pushed during the round), Z", got)
	}
}

// TestBootListingRacesCheckpointDelete: as above for a job's folder: an
// ended job's latest checkpoint is deleted after the storage's listing and
// before the job's project reads its records. The round reads the folder
// afresh (not a latest that is gone) and applies retention to it.
func TestBootListingRacesCheckpointDelete(t *testing.T) {
	h := &hooked{onStorage: true}
	e := newEnvWith(t, h.opens)
	e.fleet.projects = []*model.Project{{Name: "vision", Spec: model.ProjectSpec{Artifacts: &model.ArtifactPolicy{KeepCheckpoints: 1}}}, {Name: "nlp"}}
	e.fleet.jobs["j-done"] = &model.Job{ID: "j-done", Project: "vision", State: model.JobSucceeded}
	if _, err := e.fleet.DataKey("nlp"); err != nil {
		t.Fatal(err)
	}
	for step := 1; step <= 3; step++ {
		e.checkpoint(t, "vision", "j-done", step, map[string]string{"opt.pt": fmt.Sprint("state ", step)})
	}
	ctx := context.Background()
	var delErr error
	h.hook = func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, delErr = e.cat.Delete(ctx, "vision", artifacts.Ref{Job: "j-done", Version: "3"}, false)
		}()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("the delete waited for the round: the storage was listed under vision's lock, so this does not race")
		}
	}
	rep := e.round(t)
	if delErr != nil {
		t.Fatal(delErr)
	}
	if rep.Skipped != 0 || rep.Manifests != 1 {
		t.Errorf("round %+v, want no folder skipped and step 1 removed (step 2 the newest left)", rep)
	}
	list, err := e.cat.List(ctx, "vision", model.ArtifactFilter{Job: "j-done"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Step != 2 {
		t.Errorf("checkpoints left %+v, want step 2 only", list)
	}
}

// TestFrozenRoundDeletesNothing: a round that wakes more than an hour
// after it began (a frozen old leader) stops before deleting anything on
// what it read before.
func TestFrozenRoundDeletesNothing(t *testing.T) {
	h := &hooked{onList: true}
	e := newEnvWith(t, h.opens)
	ctx := context.Background()
	e.checkpoint(t, "vision", "j-train", 1, map[string]string{"a": "one"})
	key, _ := e.fleet.DataKey("vision")
	sl, _ := objstore.NewSealer(key)
	orphan := ckptsync.ObjectKey(ckptsync.JobPrefix(sl, "j-train"), strings.Repeat("cd", 32))
	if _, err := e.store.Put(ctx, orphan, sl.Seal(strings.NewReader("torn"), orphan), objstore.SealedSize(4)); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(25 * time.Hour)
	h.key, h.hook = orphan, func() { e.clock.Advance(2 * time.Hour) }
	if _, err := e.cat.Retain(ctx); err == nil || !strings.Contains(err.Error(), "outlived") {
		t.Errorf("frozen round: %v, want it stopped", err)
	}
	if _, err := e.store.Stat(ctx, orphan); err != nil {
		t.Errorf("the frozen round deleted the orphan: %v", err)
	}
	// The next round, not frozen, collects it.
	if rep := e.round(t); rep.Objects != 1 {
		t.Errorf("next round collected %d, want the orphan", rep.Objects)
	}
}

// opens makes the catalogue open its storage through h.
func (h *hooked) opens(cfg *artifacts.Config) {
	cfg.Open = func(ctx context.Context, s model.Storage, cr objstore.Credentials) (objstore.Store, error) {
		st, err := objstore.Open(ctx, s, cr)
		h.Store = st
		return h, err
	}
}
