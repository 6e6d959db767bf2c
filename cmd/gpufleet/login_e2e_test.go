package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// A member logs in with --token-stdin, gets their one project as the
// context's default, and `run` then submits there without naming it; the
// config keeps the token private; a revoked token is told to log in again;
// each failure kind has its own exit code.
func TestLoginContextsAndExitCodes(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir, freePort(t))
	var alice api.TokenCreated
	if err := json.Unmarshal([]byte(s.gpufleet("tokens", "create", "alice", "--ttl", "1h", "-o", "json")), &alice); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("roles", "grant", "alice", "vision", "member")
	url := serverURL(t, dir)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")

	// As alice, with no data dir to fall back on: only the context.
	cli := func(stdin string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"--data-dir", filepath.Join(t.TempDir(), "none")}, args...)...)
		cmd.Env = append(cleanEnv(), "GPUFLEET_CONFIG="+cfgPath)
		cmd.Dir = cliDir
		cmd.Stdin = strings.NewReader(stdin)
		out, err := outputOf(cmd)
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out, ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return out, 0
	}

	if out, code := cli("", "login", url); code != exitUsage || !strings.Contains(out, "--token-stdin") {
		t.Errorf("login without a terminal or --token-stdin: exit %d\n%s", code, out)
	}
	if out, code := cli("gfu_not-a-real-token\n", "login", url, "--token-stdin"); code == 0 || !strings.Contains(out, "refused this token") {
		t.Errorf("login with a bad token: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(cfgPath); err == nil {
		t.Error("a refused login wrote the config")
	}
	out, code := cli(alice.Secret+"\n", "login", url, "--token-stdin", "--name", "lab")
	if code != 0 || !strings.Contains(out, "Default project: vision") {
		t.Fatalf("login: exit %d\n%s", code, out)
	}
	fi, err := os.Stat(cfgPath)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v, %v; want mode 0600", fi, err)
	}
	out, _ = cli("", "config", "get-contexts", "-o", "json")
	if strings.Contains(out, alice.Secret) {
		t.Errorf("get-contexts printed the token:\n%s", out)
	}
	var list struct {
		Items []contextView `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Items) != 1 || !list.Items[0].Current || list.Items[0].Project != "vision" || !list.Items[0].HasToken {
		t.Fatalf("get-contexts = %s (%v)", out, err)
	}

	// run goes to the context's project without --project.
	out, code = cli("", "run", "--gpus", "0", "--upload-workdir", "-o", "json", "--", "true")
	if code != 0 {
		t.Fatalf("run as alice through the context: exit %d\n%s", code, out)
	}
	var job api.JobView
	if err := json.Unmarshal([]byte(out), &job); err != nil || job.Project != "vision" {
		t.Fatalf("submitted job = %s (%v); want project vision", out, err)
	}
	// Filters: by user and queue across projects, wide columns; a bad
	// state lists the valid ones.
	wide := s.gpufleet("jobs", "list", "-a", "-A", "--user", "alice", "--queue", "default", "-o", "wide")
	if !strings.Contains(wide, job.ID) || !strings.Contains(wide, "PROJECT") || !strings.Contains(wide, "vision") {
		t.Errorf("jobs list --user alice -o wide:\n%s", wide)
	}
	if none := s.gpufleet("jobs", "list", "-a", "-A", "--user", "bob"); strings.Contains(none, job.ID) {
		t.Errorf("jobs list --user bob shows alice's job:\n%s", none)
	}
	if out, code := cli("", "jobs", "list", "--state", "runing"); code != exitUsage || !strings.Contains(out, "succeeded") {
		t.Errorf("jobs list --state runing: exit %d, want %d listing the valid states\n%s", code, exitUsage, out)
	}
	// Completion of a job id comes from the server, with name and state.
	if out, _ := cli("", "__complete", "jobs", "get", ""); !strings.Contains(out, job.ID+"\t") {
		t.Errorf("completing `jobs get` does not offer %s:\n%s", job.ID, out)
	}
	if out, _ := cli("", "__complete", "run", "--gpu", "H1"); !strings.Contains(out, "H100") {
		t.Errorf("completing --gpu does not offer H100:\n%s", out)
	}
	// A project alice holds no role in: forbidden, 4.
	if out, code := cli("", "run", "--gpus", "0", "--upload-workdir", "--project", "other", "--", "true"); code != exitForbidden {
		t.Errorf("run in a project without a role: exit %d, want %d\n%s", code, exitForbidden, out)
	}
	// Usage 2, not found 3.
	if out, code := cli("", "jobs", "lst"); code != exitUsage || !strings.Contains(out, "Did you mean this?") {
		t.Errorf("jobs lst: exit %d, want %d with a suggestion\n%s", code, exitUsage, out)
	}
	if out, code := cli("", "jobs", "get", "j-doesnotexist"); code != exitNotFound {
		t.Errorf("jobs get of a missing job: exit %d, want %d\n%s", code, exitNotFound, out)
	}
	if out, code := cli("", "config", "use-context", "nope"); code != exitNotFound {
		t.Errorf("use-context of a missing context: exit %d, want %d\n%s", code, exitNotFound, out)
	}
	// Conflict 5: cancel a job that has ended.
	s.waitJob(job.ID, func(v api.JobView) bool { return v.State == "succeeded" }, "succeeded")
	if out, code := cli("", "jobs", "cancel", job.ID); code != exitConflict {
		t.Errorf("cancel of an ended job: exit %d, want %d\n%s", code, exitConflict, out)
	}
	// Unreachable 6: an explicit --server nobody listens on gets no token
	// of the context (it is another server), so name one.
	if out, code := cli("", "--server", "http://"+freePort(t), "--token", "x", "jobs", "list"); code != exitUnreachable {
		t.Errorf("jobs list against a closed port: exit %d, want %d\n%s", code, exitUnreachable, out)
	}

	// Revoked: told to log in again, exit 4.
	for _, tk := range decodeItems[model.Token](t, s.gpufleet("tokens", "list", "-o", "json")) {
		if tk.Subject == "alice" {
			s.gpufleet("tokens", "revoke", tk.ID)
		}
	}
	out, code = cli("", "jobs", "list")
	if code != exitForbidden || !strings.Contains(out, "gpufleet login") || strings.Contains(out, "gpufleet up") {
		t.Errorf("a revoked token: exit %d, want %d and a hint to log in again\n%s", code, exitForbidden, out)
	}
	if out, code := cli("", "logout"); code != 0 {
		t.Errorf("logout: exit %d\n%s", code, out)
	}
	data, _ := os.ReadFile(cfgPath)
	if strings.Contains(string(data), alice.Secret) {
		t.Error("logout left the token in the config")
	}
}

// serverURL reads the address `up` wrote into its data dir.
func serverURL(t *testing.T, dataDir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dataDir, serverFile))
	if err != nil {
		t.Fatal(err)
	}
	var info serverInfo
	if err := json.Unmarshal(data, &info); err != nil {
		t.Fatal(err)
	}
	return info.URL
}
