package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/gitops"
	"github.com/gpufleet/gpufleet/internal/model"
)

// gitRun runs git in dir as author Ada and returns its output.
func gitRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Ada Lovelace", "GIT_AUTHOR_EMAIL=ada@example.com",
		"GIT_COMMITTER_NAME=Ada Lovelace", "GIT_COMMITTER_EMAIL=ada@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// A server started with --gitops-repo on a local bare repository applies
// its commits (autoApply), records the commit in the revision, and shows
// the head through `gpufleet plan --pending`, `history` and `drift`.
func TestGitOpsServer(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("git is not installed; CI must provide it")
		}
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	bare, work := filepath.Join(root, "fleet.git"), filepath.Join(root, "work")
	gitRun(t, root, "init", "-q", "--bare", "-b", "main", bare)
	gitRun(t, root, "clone", "-q", bare, work)
	gitRun(t, work, "checkout", "-q", "-b", "main")
	commit := func(file, content, msg string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(work, "fleet"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, "fleet", file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		gitRun(t, work, "add", "-A")
		gitRun(t, work, "commit", "-q", "-m", msg)
		gitRun(t, work, "push", "-q", "origin", "main")
		return gitRun(t, work, "rev-parse", "HEAD")
	}
	sha := commit("queues.yaml", "apiVersion: gpufleet.dev/v1\nkind: Queue\nmetadata: {name: research}\nspec: {weight: 3}\n", "research queue")

	s := startServer(t, t.TempDir(), freePort(t), "--gitops-repo", bare, "--gitops-path", "fleet",
		"--gitops-interval", "200ms", "--gitops-auto-apply")
	waitStatus := func(want func(gitops.Status) bool) gitops.Status {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var st gitops.Status
			if err := json.Unmarshal([]byte(s.gpufleet("plan", "--pending", "-o", "json")), &st); err != nil {
				t.Fatal(err)
			}
			if want(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("gitops status %+v\nserver log:\n%s", st, s.out)
			}
			time.Sleep(100 * time.Millisecond) // polling the server's poll; bounded by the deadline
		}
	}
	st := waitStatus(func(st gitops.Status) bool { return st.Applied > 0 })
	if st.Head.SHA != sha || !st.InSync || st.Head.Author != "Ada Lovelace <ada@example.com>" {
		t.Fatalf("status %+v", st)
	}
	revs := decodeItems[model.Revision](t, s.gpufleet("history", "-o", "json"))
	if len(revs) != 1 || revs[0].Commit != sha || revs[0].Author != gitops.Author {
		t.Fatalf("revisions %+v", revs)
	}
	if out := s.gpufleet("history"); !strings.Contains(out, "research queue (git "+sha[:12]+" by Ada Lovelace <ada@example.com>)") {
		t.Errorf("history:\n%s", out)
	}
	if out := s.gpufleet("drift"); !strings.Contains(out, "GitOps: the fleet matches main@"+sha[:12]) {
		t.Errorf("drift:\n%s", out)
	}
	sha2 := commit("queues.yaml", "apiVersion: gpufleet.dev/v1\nkind: Queue\nmetadata: {name: research}\nspec: {weight: 5}\n", "weight 5")
	waitStatus(func(st gitops.Status) bool {
		return st.Head != nil && st.Head.SHA == sha2 && st.Applied == 2 && st.InSync
	})
	if out := s.gpufleet("plan", "--pending"); !strings.Contains(out, "Applied as revision 2") || !strings.Contains(out, "matches the head") {
		t.Errorf("plan --pending:\n%s", out)
	}
}
