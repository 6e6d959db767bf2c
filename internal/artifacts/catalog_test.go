package artifacts_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/artifacts"
	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/objstore"
	"github.com/gpufleet/gpufleet/internal/s3test"
)

// fleet is the control plane as the catalogue sees it: one pool with S3
// checkpoint storage, jobs by project, sealed secrets in memory.
type fleet struct {
	mu       sync.Mutex
	pools    []*model.NodePool
	projects []*model.Project
	jobs     map[string]*model.Job
	secrets  map[string]string // project/name → value
}

func (f *fleet) NodePools() []*model.NodePool { return f.pools }
func (f *fleet) Projects() []*model.Project {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.projects
}

func (f *fleet) Jobs(q model.JobFilter) []*model.Job {
	var out []*model.Job
	for _, j := range f.jobs {
		if q.Project == "" || j.Project == q.Project {
			out = append(out, j)
		}
	}
	return out
}

func (f *fleet) Job(id string) (*model.Job, error) {
	if j, ok := f.jobs[id]; ok {
		return j, nil
	}
	return nil, model.ErrNotFound
}

func (f *fleet) JobProject(id string) (string, bool) {
	j, ok := f.jobs[id]
	if !ok {
		return "", false
	}
	return j.Project, true
}

func (f *fleet) Has(project, name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.secrets[project+"/"+name]
	return ok
}

func (f *fleet) Value(project, name string) (string, bool, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.secrets[project+"/"+name]
	return v, ok, ok
}

func (f *fleet) DataKey(project string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := project + "/" + model.DataKeySecret
	if _, ok := f.secrets[k]; !ok {
		sum := sha256.Sum256([]byte("key of " + project))
		f.secrets[k] = hex.EncodeToString(sum[:])
	}
	return hex.DecodeString(f.secrets[k])
}

// env is a catalogue over a real versitygw.
type env struct {
	srv   *s3test.Server
	raw   string // the bucket's folder
	fleet *fleet
	cat   *artifacts.Catalog
	clock *clock.Fake
	store objstore.Store
}

func newEnv(t *testing.T) *env { return newEnvWith(t, nil) }

// newEnvWith is newEnv with the catalogue's configuration changed by mod.
func newEnvWith(t *testing.T, mod func(*artifacts.Config)) *env {
	t.Helper()
	srv := s3test.Start(t)
	raw := srv.CreateBucket(t, "art")
	storage := model.Storage{S3: &model.S3Storage{Bucket: "art", Prefix: "fleet", Endpoint: srv.Endpoint, PathStyle: true, CredentialsRef: "ops/S3"}}
	f := &fleet{
		pools:   []*model.NodePool{{Name: "spot", Spec: model.NodePoolSpec{CheckpointStorage: &storage}}},
		jobs:    map[string]*model.Job{},
		secrets: map[string]string{"ops/S3": s3test.AccessKey + ":" + s3test.SecretKey},
	}
	for _, j := range []*model.Job{{ID: "j-train", Project: "vision", State: model.JobRunning}, {ID: "j-other", Project: "nlp", State: model.JobSucceeded}} {
		f.jobs[j.ID] = j
	}
	fc := clock.NewFake(time.Now())
	cfg := artifacts.Config{Fleet: f, Keys: f, Clock: fc}
	if mod != nil {
		mod(&cfg)
	}
	cat, err := artifacts.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := objstore.Open(context.Background(), storage, objstore.Credentials{AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, raw: raw, fleet: f, cat: cat, clock: fc, store: st}
}

// push sends files as a new version of name, the way the CLI does: commit,
// send what is missing, commit again.
func (e *env) push(t *testing.T, project, name string, files map[string]string, tags ...string) model.Artifact {
	t.Helper()
	ctx := context.Background()
	p := model.ArtifactPush{Tags: tags}
	for path, content := range files {
		sum := sha256.Sum256([]byte(content))
		p.Files = append(p.Files, model.ArtifactFile{Path: path, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:]), Mode: 0o644})
	}
	for round := 0; round < 2; round++ {
		a, missing, err := e.cat.Commit(ctx, project, name, p)
		if err != nil {
			t.Fatal(err)
		}
		if a != nil {
			return *a
		}
		if round == 1 {
			t.Fatalf("still missing after sending: %v", missing)
		}
		for _, sum := range missing {
			for _, f := range p.Files {
				if f.SHA256 == sum {
					if err := e.cat.PutObject(ctx, project, name, sum, f.Size, strings.NewReader(files[f.Path])); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
		}
	}
	panic("unreachable")
}

// read reads one file of an artefact through the catalogue.
func (e *env) read(project string, r artifacts.Ref, path string) (string, error) {
	_, _, rc, err := e.cat.Open(context.Background(), project, r, path)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

// checkpoint uploads a checkpoint of job at step the way a node does.
func (e *env) checkpoint(t *testing.T, project, job string, step int, files map[string]string) {
	t.Helper()
	key, _ := e.fleet.DataKey(project)
	sl, _ := objstore.NewSealer(key)
	dir := t.TempDir()
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ckptsync.Marker), []byte(fmt.Sprintf("step=%d", step)), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := ckptsync.New(ckptsync.Config{Store: e.store, Sealer: sl, JobID: job, Attempt: "a", AttemptNumber: 1, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Upload(context.Background()); err != nil || !ok {
		t.Fatalf("upload: %v %v", ok, err)
	}
}

func TestPushListGetRoundTrip(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	weights := strings.Repeat("w", 3<<20+17) // several seal chunks
	v1 := e.push(t, "vision", "resnet", map[string]string{"model.safetensors": weights, "config/config.json": `{"layers": 50}`}, "release")
	v2 := e.push(t, "vision", "resnet", map[string]string{"model.safetensors": weights, "config/config.json": `{"layers": 51}`})
	if v1.Version == "" || v2.Version <= v1.Version {
		t.Fatalf("versions %q then %q: want increasing", v1.Version, v2.Version)
	}
	e.checkpoint(t, "vision", "j-train", 100, map[string]string{"opt.pt": "optimizer state 100"})
	e.checkpoint(t, "vision", "j-train", 200, map[string]string{"opt.pt": "optimizer state 200"})

	list, err := e.cat.List(ctx, "vision", model.ArtifactFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range list {
		got = append(got, fmt.Sprintf("%s %s%s step=%d latest=%v tags=%v files=%d", a.Kind, a.Job, a.Name, a.Step, a.Latest, a.Tags, a.Count))
	}
	want := []string{
		"checkpoint j-train step=200 latest=true tags=[] files=2",
		"checkpoint j-train step=100 latest=false tags=[] files=2",
		"model resnet step=0 latest=true tags=[] files=2",
		"model resnet step=0 latest=false tags=[release] files=2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("list:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Every byte comes back, verified, by version, by tag and latest.
	for _, c := range []struct {
		ref  artifacts.Ref
		path string
		want string
	}{
		{artifacts.Ref{Name: "resnet", Version: v1.Version}, "config/config.json", `{"layers": 50}`},
		{artifacts.Ref{Name: "resnet", Version: "@release"}, "config/config.json", `{"layers": 50}`},
		{artifacts.Ref{Name: "resnet"}, "config/config.json", `{"layers": 51}`},
		{artifacts.Ref{Name: "resnet"}, "model.safetensors", weights},
		{artifacts.Ref{Job: "j-train", Version: "100"}, "opt.pt", "optimizer state 100"},
		{artifacts.Ref{Job: "j-train"}, "opt.pt", "optimizer state 200"},
	} {
		b, err := e.read("vision", c.ref, c.path)
		if err != nil || b != c.want {
			t.Errorf("%s %s: %d bytes, %v; want %d bytes", c.ref, c.path, len(b), err, len(c.want))
		}
	}
	// The unchanged weights were stored once.
	n := 0
	filepath.WalkDir(e.raw, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.Contains(p, "/o/") {
			if fi, _ := d.Info(); fi.Size() > 3<<20 {
				n++
			}
		}
		return nil
	})
	if n != 1 {
		t.Errorf("%d stored copies of the weights, want 1", n)
	}
	// Another project sees none of it and cannot name vision's job.
	if l, err := e.cat.List(ctx, "nlp", model.ArtifactFilter{}); err != nil || len(l) != 0 {
		t.Errorf("nlp lists %v, %v; want nothing", l, err)
	}
	if _, err := e.cat.Get(ctx, "nlp", artifacts.Ref{Job: "j-train"}); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("nlp reading vision's job: %v, want not found", err)
	}
	if _, err := e.cat.Get(ctx, "nlp", artifacts.Ref{Name: "resnet"}); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("nlp reading vision's artefact: %v, want not found", err)
	}
}

func TestTamperedObjectIsNamed(t *testing.T) {
	e := newEnv(t)
	content := strings.Repeat("x", 2<<20)
	e.push(t, "vision", "bert", map[string]string{"weights.bin": content})
	// Flip one byte in the middle of the stored object, on the server's disk.
	var obj string
	filepath.WalkDir(e.raw, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.Contains(p, "/o/") {
			obj = p
		}
		return nil
	})
	b, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(obj, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := e.read("vision", artifacts.Ref{Name: "bert"}, "weights.bin")
	if !errors.Is(err, model.ErrCorrupt) {
		t.Fatalf("read %d bytes, err %v; want ErrCorrupt", len(got), err)
	}
	if name := filepath.Base(obj); !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "weights.bin") {
		t.Errorf("error %q names neither the object %s nor the file", err, name)
	}
	// A stored object whose content does not match the SHA-256 it is sent
	// under is refused and not kept.
	sum := sha256.Sum256([]byte("the real content"))
	err = e.cat.PutObject(context.Background(), "vision", "bert", hex.EncodeToString(sum[:]), 4, strings.NewReader("fake"))
	var fe model.FieldErrors
	if !errors.As(err, &fe) {
		t.Errorf("mismatched put: %v, want a field error", err)
	}
}

func TestRetentionKeepsLastNAndRelease(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.fleet.projects = []*model.Project{{Name: "vision", Spec: model.ProjectSpec{Artifacts: &model.ArtifactPolicy{KeepCheckpoints: 2, KeepVersions: 1}}}}
	for step := 1; step <= 4; step++ {
		e.checkpoint(t, "vision", "j-train", step*100, map[string]string{"opt.pt": fmt.Sprintf("state %d", step), "base.bin": "unchanged base"})
	}
	rel := e.push(t, "vision", "gpt", map[string]string{"w": "weights 1"}, "release")
	e.push(t, "vision", "gpt", map[string]string{"w": "weights 2"})
	e.push(t, "vision", "gpt", map[string]string{"w": "weights 3"})
	// A torn upload's leftover: an object no manifest names.
	key, _ := e.fleet.DataKey("vision")
	sl, _ := objstore.NewSealer(key)
	orphan := ckptsync.ObjectKey(ckptsync.JobPrefix(sl, "j-train"), strings.Repeat("ab", 32))
	if _, err := e.store.Put(ctx, orphan, sl.Seal(strings.NewReader("torn"), orphan), objstore.SealedSize(4)); err != nil {
		t.Fatal(err)
	}

	rep, err := e.cat.Retain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Retention removed two checkpoints and one version; nothing is old
	// enough to collect yet, not even the orphan.
	if rep.Manifests != 3 || rep.Objects != 0 {
		t.Errorf("first round removed %+v, want 3 manifests and no objects (within grace)", rep)
	}
	steps := func() string {
		l, err := e.cat.List(ctx, "vision", model.ArtifactFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, a := range l {
			s = append(s, fmt.Sprintf("%s%d%v", a.Name, a.Step, a.Tags))
		}
		return strings.Join(s, " ")
	}
	if got, want := steps(), "400[] 300[] gpt0[] gpt0[release]"; got != want {
		t.Errorf("after retention: %s, want %s", got, want)
	}
	if _, err := os.Stat(filepath.Join(e.raw, "fleet", filepath.FromSlash(orphan))); err != nil {
		t.Errorf("orphan removed within its grace: %v", err)
	}

	// Past the grace period: unreferenced objects go, referenced ones stay.
	e.clock.Advance(25 * time.Hour)
	rep, err = e.cat.Retain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Steps 100 and 200 (their opt.pt and LATEST), weights 2, the orphan.
	if rep.Objects != 6 {
		t.Errorf("second round collected %d objects, want 6", rep.Objects)
	}
	if _, err := os.Stat(filepath.Join(e.raw, "fleet", filepath.FromSlash(orphan))); !os.IsNotExist(err) {
		t.Errorf("orphan still there past its grace: %v", err)
	}
	for _, c := range []struct {
		ref        artifacts.Ref
		path, want string
	}{
		{artifacts.Ref{Job: "j-train"}, "opt.pt", "state 4"},
		{artifacts.Ref{Job: "j-train", Version: "300"}, "opt.pt", "state 3"},
		{artifacts.Ref{Job: "j-train", Version: "300"}, "base.bin", "unchanged base"},
		{artifacts.Ref{Name: "gpt", Version: rel.Version}, "w", "weights 1"},
		{artifacts.Ref{Name: "gpt"}, "w", "weights 3"},
	} {
		if got, err := e.read("vision", c.ref, c.path); err != nil || got != c.want {
			t.Errorf("%s %s after collection: %q, %v", c.ref, c.path, got, err)
		}
	}
	// The job's node restores its latest checkpoint from what is left.
	s, _ := ckptsync.New(ckptsync.Config{Store: e.store, Sealer: sl, JobID: "j-train", Dir: t.TempDir()})
	if m, ok, err := s.Restore(ctx); err != nil || !ok || m.Step != 400 {
		t.Errorf("restore after collection: step %d %v %v", m.Step, ok, err)
	}
}

func TestCollectionLeavesAFolderWithAnUnreadableManifestAlone(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.checkpoint(t, "vision", "j-train", 1, map[string]string{"a": "one"})
	e.checkpoint(t, "vision", "j-train", 2, map[string]string{"a": "two"})
	// Corrupt the latest manifest: nothing in the folder can be judged
	// unreferenced any more.
	key, _ := e.fleet.DataKey("vision")
	sl, _ := objstore.NewSealer(key)
	latest := filepath.Join(e.raw, "fleet", filepath.FromSlash(ckptsync.LatestKey(ckptsync.JobPrefix(sl, "j-train"))))
	b, _ := os.ReadFile(latest)
	b[len(b)-1] ^= 1
	os.WriteFile(latest, b, 0o600)
	e.clock.Advance(48 * time.Hour)
	rep, err := e.cat.Retain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Objects != 0 || rep.Skipped != 1 {
		t.Errorf("collected %+v, want nothing removed and the folder skipped", rep)
	}
	if _, err := e.cat.List(ctx, "vision", model.ArtifactFilter{Job: "j-train"}); !errors.Is(err, model.ErrCorrupt) {
		t.Errorf("listing with a corrupt latest: %v, want ErrCorrupt", err)
	}
}
