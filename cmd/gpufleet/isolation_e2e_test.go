package main

import (
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/agent"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// escalation is what a hostile tenant's job tries: the control plane's
// files through relative and absolute paths, its neighbours' replica specs
// (job tokens, secrets), other processes' environments, and every
// spec.json it can find.
const escalation = `set +e
echo "uid: $(id -u)"
cat ../../../../admin.token ../../../admin.token ../../admin.token
timeout 15 grep -rh gfj_ ../../*/ ../../../*/ 2>&1 | head -c 20000
cat "$DATA/admin.token"; ls "$DATA" && echo LISTED-DATA-DIR
base64 "$DATA/secrets.key"
timeout 15 cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -a 'GPUFLEET_JOB_TOKEN\|VISION_KEY'
timeout 30 find / -name spec.json -not -path '/proc/*' -not -path '/sys/*' -not -path '/dev/*' 2>/dev/null | head -100 | xargs cat 2>&1 | head -c 20000
ls "$GPUFLEET_CHECKPOINT_DIR/.." | grep -q 'j-' && echo LISTED-CHECKPOINTS
echo done`

// TestJobsCannotReachTheControlPlane: a project member's job, run as a
// plain process, from a gang replica, from an uploaded archive and (where
// podman works) in a container, reads none of the admin token, the sealing
// key, another job's token or another project's secret, and cannot list
// the data dir.
func TestJobsCannotReachTheControlPlane(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("isolating jobs needs root (workload users); as another user only admins' jobs run")
	}
	dir := t.TempDir()
	s := startServer(t, dir, freePort(t))
	const neighbourSecret = "vision_Yq3mW8rT5kLx9Zc2"

	user := func(name, project, role string) func(stdin string, args ...string) (string, error) {
		var tok api.TokenCreated
		if err := json.Unmarshal([]byte(s.gpufleet("tokens", "create", name, "--ttl", "1h", "-o", "json")), &tok); err != nil {
			t.Fatal(err)
		}
		s.gpufleet("roles", "grant", name, project, role)
		return func(stdin string, args ...string) (string, error) {
			cmd := s.gpufleetCmd(args...)
			cmd.Env = append(cmd.Env, "GPUFLEET_TOKEN="+tok.Secret)
			cmd.Stdin = strings.NewReader(stdin)
			cmd.Dir = t.TempDir()
			return outputOf(cmd)
		}
	}
	must := func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return strings.TrimSpace(out)
	}
	alice := user("alice", "vision", "project-admin")
	mallory := user("mallory", "nlp", "member")

	// The neighbour: another project's job that holds a secret and its
	// job token while mallory's jobs look around.
	must(alice(neighbourSecret+"\n", "secrets", "set", "vision", "VISION_KEY"))
	neighbour := must(alice("", "run", "--upload-workdir", "--project", "vision", "--secret", "VISION_KEY", "--gpus", "1", "--", "sleep", "300"))
	s.waitJob(neighbour, func(v api.JobView) bool { return v.State == model.JobRunning }, "started")

	secrets := map[string]string{"neighbour's secret": neighbourSecret}
	admin, err := os.ReadFile(filepath.Join(dir, tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	secrets["admin token"] = strings.TrimSpace(string(admin))
	key, err := os.ReadFile(filepath.Join(dir, secretKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	secrets["sealing key"] = strings.TrimSpace(string(key))
	secrets["sealing key (base64)"] = base64.StdEncoding.EncodeToString(key)[:40]
	secrets["neighbour's job token"] = jobTokenOf(t, dir, neighbour)

	env := "DATA=" + dir
	cases := map[string][]string{
		"process":     {"run", "--upload-workdir", "--project", "nlp", "--env", env, "--", "sh", "-c", escalation},
		"gang":        {"run", "--upload-workdir", "--project", "nlp", "--replicas", "2", "--gpus", "1", "--env", env, "--", "sh", "-c", escalation},
		"host folder": {"run", "--project", "nlp", "--env", env, "--", "sh", "-c", escalation},
	}
	if podmanWorks(t) {
		image := buildExampleImages(t)
		cases["container"] = []string{"run", "--project", "nlp", "--image", image, "--env", env, "--", "sh", "-c", escalation}
	}
	parent := s.t
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			s.t = t // the server's helpers fail this subtest, not its parent
			defer func() { s.t = parent }()
			out, err := mallory("", args...)
			if name == "host folder" {
				// A member may not run in a host folder: refused, nothing runs.
				if err == nil || !strings.Contains(out, "spec.run.workdir") {
					t.Fatalf("a member's job in a host folder was not refused: %v\n%s", err, out)
				}
				return
			}
			id := must(out, err)
			v := s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
			logs := s.gpufleet("jobs", "logs", id)
			if v.State != model.JobSucceeded || !strings.Contains(logs, "done") {
				t.Fatalf("the job %s (%s); log:\n%s", v.State, v.Reason, logs)
			}
			if strings.Contains(logs, "uid: 0\n") {
				t.Errorf("the job ran as root:\n%s", logs)
			}
			for _, marker := range []string{"LISTED-DATA-DIR", "LISTED-CHECKPOINTS"} {
				if strings.Contains(logs, marker) {
					t.Errorf("the job could list what it must not (%s):\n%s", marker, logs)
				}
			}
			for what, secret := range secrets {
				if strings.Contains(logs, secret) {
					t.Errorf("the job read the %s:\n%s", what, logs)
				}
			}
		})
	}
}

// jobTokenOf reads job id's token from the agent's copy of its replica spec,
// which must be its owner's only (mode 0600).
func jobTokenOf(t *testing.T, dataDir, jobID string) string {
	t.Helper()
	token := replicaEnv(t, dataDir, jobID)["GPUFLEET_JOB_TOKEN"]
	if !strings.HasPrefix(token, "gfj_") {
		t.Fatalf("finding job %s's token: %q", jobID, token)
	}
	return token
}

// replicaEnv is the environment of job id's replica, secrets included, from
// the agent's copy of its spec, which must be its owner's only (mode 0600).
func replicaEnv(t *testing.T, dataDir, jobID string) map[string]string {
	t.Helper()
	var env map[string]string
	err := filepath.WalkDir(filepath.Join(dataDir, "agent"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "spec.json" || !strings.Contains(path, jobID) {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", path, info.Mode().Perm())
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var spec struct{ Env map[string]string }
		if err := json.Unmarshal(data, &spec); err != nil {
			return err
		}
		env = spec.Env
		return nil
	})
	if err != nil || env == nil {
		t.Fatalf("finding job %s's replica spec: %v", jobID, err)
	}
	return env
}

// podmanWorks reports whether rootful podman runs here; with CI set it
// must (.ci/run installs it).
func podmanWorks(t *testing.T) bool {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set and podman is missing: .ci/run installs it")
		}
		return false
	}
	return os.Geteuid() == 0
}

// buildExampleImages builds examples/images (base → framework → app) with
// the binary under test and returns the app image's name.
func buildExampleImages(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("sh", filepath.Join("..", "..", "examples", "images", "build.sh"))
	cmd.Env = append(cleanEnv(), "GPUFLEET="+binary)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the example images: %v\n%s", err, out)
	}
	return "localhost/gpufleet-example/app:1"
}

// sharedDir is a temporary folder that jobs, which run as workload users,
// can read and write, as a host folder of an admin's job must be: a
// t.TempDir() is its owner's only (0700, and so is the folder above it).
func sharedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkpointRoot is where a server on dataDir keeps jobs' checkpoint
// folders: under its work root, outside the data dir.
func checkpointRoot(dataDir string) string {
	return filepath.Join(agent.DefaultWorkRoot(filepath.Join(dataDir, "agent")), "checkpoints")
}
