package gitops

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/secrets"
	"github.com/gpufleet/gpufleet/internal/store/sqlite"
)

// needGit skips without the git binary (go-git's file transport runs
// git-upload-pack), and fails under CI, which must have it.
func needGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("git is not installed; CI must provide it")
		}
		t.Skip("git is not installed: skipping the GitOps tests")
	}
}

// upstream is a bare repository on disk and a clone in memory that
// commits and pushes to it.
type upstream struct {
	t    *testing.T
	bare string
	repo *git.Repository
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	bare := filepath.Join(t.TempDir(), "fleet.git")
	if _, err := git.PlainInit(bare, true); err != nil {
		t.Fatal(err)
	}
	repo, err := git.Init(memory.NewStorage(), memfs.New())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{bare}}); err != nil {
		t.Fatal(err)
	}
	return &upstream{t: t, bare: bare, repo: repo}
}

// commit writes files (path → content; "" deletes), commits them as
// author on branch main and pushes; it returns the SHA.
func (u *upstream) commit(author, msg string, files map[string]string) string {
	u.t.Helper()
	wt, err := u.repo.Worktree()
	if err != nil {
		u.t.Fatal(err)
	}
	for p, content := range files {
		if content == "" {
			if _, err := wt.Remove(p); err != nil {
				u.t.Fatal(err)
			}
			continue
		}
		f, err := wt.Filesystem.Create(p)
		if err != nil {
			u.t.Fatal(err)
		}
		f.Write([]byte(content))
		f.Close()
		if _, err := wt.Add(p); err != nil {
			u.t.Fatal(err)
		}
	}
	name, email, _ := strings.Cut(author, " <")
	h, err := wt.Commit(msg, &git.CommitOptions{Author: &object.Signature{Name: name, Email: strings.TrimSuffix(email, ">"), When: time.Now()}})
	if err != nil {
		u.t.Fatal(err)
	}
	if err := u.repo.Push(&git.PushOptions{RemoteName: "origin", RefSpecs: []config.RefSpec{"refs/heads/master:refs/heads/main"}}); err != nil {
		u.t.Fatal(err)
	}
	return h.String()
}

func queueDoc(name string, weight int) string {
	return "apiVersion: gpufleet.dev/v1\nkind: Queue\nmetadata: {name: " + name + "}\nspec: {weight: " + strconv.Itoa(weight) + "}\n"
}

// newController runs a controller on a SQLite file.
func newController(t *testing.T) *controller.Controller {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "gpufleet.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keyring, err := secrets.NewKeyring(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := controller.New(ctx, controller.Config{
		Store: st, Logs: logs, Clock: clock.NewFake(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)), ServerURL: "http://127.0.0.1:7777",
		Keyring: keyring, CheckpointDir: t.TempDir(), HeartbeatTimeout: time.Hour, PassGap: -1,
		Cost: controller.CostConfig{MeterInterval: -1}, Alerts: controller.AlertRules{QueueWaitP95: -1},
		Fatal: func(err error) { t.Errorf("fatal: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = c.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; c.Close(); st.Close() })
	return c
}

func queueWeight(t *testing.T, c *controller.Controller, name string) int {
	t.Helper()
	_, set := c.Declared()
	for _, q := range set.Queues {
		if q.Metadata.Name == name {
			return int(q.Spec.Weight)
		}
	}
	return -1
}

// A GitOps syncer with autoApply applies each new commit once, as a
// revision carrying the commit and its author; a manual apply shows as
// drift against the head; a commit with a bad document is refused with
// its field path and applies nothing. Without autoApply a new commit is
// only planned (pending).
func TestSyncLocalRepository(t *testing.T) {
	needGit(t)
	ctx := context.Background()
	up := newUpstream(t)
	c := newController(t)
	sha1 := up.commit("Ada Lovelace <ada@example.com>", "add the research queue\n\nbody", map[string]string{
		"fleet/queues.yaml": queueDoc("research", 2), "README.md": "not a fleet document",
	})
	s, err := New(Config{URL: up.bare, Branch: "main", Path: "fleet", AutoApply: true, Target: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	revs := c.Revisions()
	if len(revs) != 1 || revs[0].Commit != sha1 || revs[0].CommitAuthor != "Ada Lovelace <ada@example.com>" ||
		revs[0].Author != Author || revs[0].Message != "add the research queue" {
		t.Fatalf("revisions after the first poll: %+v", revs)
	}
	if st := s.Status(); !st.InSync || st.Applied != 1 || st.Head == nil || st.Head.SHA != sha1 || st.Error != "" {
		t.Fatalf("status %+v", st)
	}
	if w := queueWeight(t, c, "research"); w != 2 {
		t.Fatalf("research weight %d, want 2", w)
	}
	// Polling the same head again applies nothing.
	if err := s.Poll(ctx); err != nil || len(c.Revisions()) != 1 {
		t.Fatalf("second poll: %v, %d revisions", err, len(c.Revisions()))
	}

	// A manual apply is drift: reported against the head, not reverted.
	manual, fe := manifest.Parse([]manifest.Source{{Name: "m.yaml", Data: []byte(queueDoc("research", 5)), Format: manifest.YAML}}, manifest.Checks{})
	if len(fe) > 0 {
		t.Fatal(fe)
	}
	if _, err := c.ApplyFleet(ctx, manual, controller.ApplyOptions{Author: "admin"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	st := s.Status()
	if st.InSync || st.Pending == nil || len(st.Pending.Changes) != 1 || st.Pending.Changes[0].Name != "research" || st.BaseRevision != 2 || len(c.Revisions()) != 2 {
		t.Fatalf("drift status %+v (%d revisions)", st, len(c.Revisions()))
	}

	// The next commit is applied.
	sha2 := up.commit("Grace Hopper <grace@example.com>", "add batch", map[string]string{"fleet/batch.yaml": queueDoc("batch", 1)})
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	revs = c.Revisions()
	if len(revs) != 3 || revs[2].Commit != sha2 || revs[2].CommitAuthor != "Grace Hopper <grace@example.com>" {
		t.Fatalf("revisions: %+v", revs)
	}
	if w := queueWeight(t, c, "research"); w != 2 || queueWeight(t, c, "batch") != 1 {
		t.Fatalf("after the second commit: research %d, batch %d", w, queueWeight(t, c, "batch"))
	}
	if st := s.Status(); !st.InSync || st.Applied != 3 {
		t.Fatalf("status %+v", st)
	}

	// A bad document: refused with its path, nothing applied.
	up.commit("Ada Lovelace <ada@example.com>", "typo", map[string]string{"fleet/batch.yaml": "apiVersion: gpufleet.dev/v1\nkind: Queue\nmetadata: {name: batch}\nspec: {wieght: 1}\n"})
	err = s.Poll(ctx)
	if err == nil || !strings.Contains(err.Error(), "fleet/batch.yaml[0].spec.wieght") || len(c.Revisions()) != 3 {
		t.Fatalf("poll of a bad commit: %v (%d revisions)", err, len(c.Revisions()))
	}
	if st := s.Status(); st.Error == "" || st.Head == nil {
		t.Fatalf("status after a bad commit %+v", st)
	}

	// Without autoApply a new commit is pending, not applied.
	sha4 := up.commit("Ada Lovelace <ada@example.com>", "batch weight 3", map[string]string{"fleet/batch.yaml": queueDoc("batch", 3)})
	plan, err := New(Config{URL: "file://" + up.bare, Branch: "main", Path: "/fleet/", Target: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	st = plan.Status()
	if len(c.Revisions()) != 3 || st.Head.SHA != sha4 || st.InSync || st.Applied != 0 || st.Pending == nil ||
		len(st.Pending.Changes) != 1 || st.Pending.Changes[0].Name != "batch" || st.Path != "fleet" {
		t.Fatalf("planned-only status %+v (%d revisions)", st, len(c.Revisions()))
	}
}

// Credentials come from a sealed secret and reach an HTTPS-style smart
// HTTP server (git http-backend behind basic auth); the wrong token is
// refused, and the error does not quote it.
func TestSyncOverHTTPWithCredentials(t *testing.T) {
	needGit(t)
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no git-http-backend: %v; CI must provide it", err)
		}
		t.Skipf("no git-http-backend: %v", err)
	}
	ctx := context.Background()
	up := newUpstream(t)
	sha := up.commit("Ada Lovelace <ada@example.com>", "queues", map[string]string{"queues.yaml": queueDoc("research", 4)})
	cgiH := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(up.bare), "GIT_HTTP_EXPORT_ALL=1"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "bot" || p != "s3cret-T0KEN" {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		cgiH.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := newController(t)
	value := "bot:s3cret-T0KEN"
	open := func(project, name string) (string, error) {
		if project != "ops" || name != "GIT" {
			return "", errors.New("no such secret")
		}
		return value, nil
	}
	s, err := New(Config{URL: srv.URL + "/fleet.git", AutoApply: true, CredentialsRef: "ops/GIT", OpenSecret: open, Target: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if revs := c.Revisions(); len(revs) != 1 || revs[0].Commit != sha || queueWeight(t, c, "research") != 4 {
		t.Fatalf("revisions %+v", revs)
	}
	value = "bot:wrong-T0KEN"
	s2, _ := New(Config{URL: srv.URL + "/fleet.git", CredentialsRef: "ops/GIT", OpenSecret: open, Target: c})
	if err := s2.Poll(ctx); err == nil || strings.Contains(err.Error(), "T0KEN") {
		t.Fatalf("poll with a wrong token: %v", err)
	}
	if _, err := New(Config{URL: srv.URL, CredentialsRef: "nope", OpenSecret: open, Target: c}); err == nil {
		t.Fatal("a malformed credentials ref was accepted")
	}
}

func TestRedactURL(t *testing.T) {
	if got := redactURL("https://bot:tok@example.com/r.git"); got != "https://example.com/r.git" {
		t.Errorf("redactURL: %q", got)
	}
}
