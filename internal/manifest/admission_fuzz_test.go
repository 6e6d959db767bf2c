package manifest

import (
	"path"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/model"
)

// FuzzJobAdmission: whatever a job manifest says, an accepted spec stays in
// its own tree (a workdir inside the archive, or a clean path that does not
// climb out; an absolute one is flagged by HostPaths for admins only), and
// names only secrets that are plain, non-reserved environment variables.
func FuzzJobAdmission(f *testing.F) {
	const head = `{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "metadata": {"name": "f"}, "spec": {"resources": {"gpus": 0}, "run": `
	for _, run := range []string{
		`{"command": ["true"], "workdir": "/home/me/src"}`,
		`{"command": ["true"], "workdir": "../../etc"}`,
		`{"command": ["true"], "workdir": "a/../../b", "archive": "sha256:` + strings.Repeat("a", 64) + `"}`,
		`{"command": ["true"], "workdir": "/abs", "archive": "sha256:` + strings.Repeat("a", 64) + `"}`,
		`{"command": ["true"], "secrets": ["HF_TOKEN", "GPUFLEET_JOB_TOKEN", "A=B", "HF_TOKEN"]}`,
		`{"command": ["true"], "env": {"X": "1"}, "secrets": ["X"]}`,
		`{"command": ["true"], "privileged": true, "hostNetwork": true}`,
		`{"command": ["true"], "mounts": [{"hostPath": "/"}]}`,
	} {
		f.Add([]byte(head + run + `}}`))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		job, fe := ParseJob(data, JSON, nil)
		if job == nil {
			if len(fe) == 0 {
				t.Fatal("refused without a problem")
			}
			return
		}
		run := job.Spec.Run
		host := job.Spec.HostPaths("spec")
		if w := run.Workdir; w != "" {
			if w != path.Clean(w) || strings.ContainsRune(w, 0) {
				t.Fatalf("accepted an unclean workdir %q", w)
			}
			if !path.IsAbs(w) && (w == ".." || strings.HasPrefix(w, "../")) {
				t.Fatalf("accepted a workdir %q that leaves the job's tree", w)
			}
			if run.Archive != "" && path.IsAbs(w) {
				t.Fatalf("accepted an absolute workdir %q inside an archive", w)
			}
			if (run.Archive == "" && path.IsAbs(w)) != (len(host) > 0) {
				t.Fatalf("HostPaths = %v for workdir %q (archive %q)", host, w, run.Archive)
			}
		} else if len(host) > 0 {
			t.Fatalf("HostPaths = %v without a workdir", host)
		}
		for _, name := range run.Secrets {
			if msg := model.ValidateSecretName(name); msg != "" {
				t.Fatalf("accepted secret %q: %s", name, msg)
			}
			if _, ok := run.Env[name]; ok {
				t.Fatalf("accepted secret %q that run.env also sets", name)
			}
		}
		for k := range run.Env {
			if strings.HasPrefix(k, "GPUFLEET_") {
				t.Fatalf("accepted reserved variable %q", k)
			}
		}
	})
}
