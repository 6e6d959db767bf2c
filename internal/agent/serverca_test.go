package agent

import (
	"path/filepath"
	"testing"

	"github.com/gpufleet/gpufleet/internal/agentapi"
)

// A job whose server is https finds the certificate its agent pins in its
// own tree, named by GPUFLEET_CA, so the CLI inside it can pin it too; a
// job of a plain-http server, or of an agent that pins nothing, gets none.
func TestJobsGetTheServerCA(t *testing.T) {
	t.Parallel()
	const pem = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
	for name, tc := range map[string]struct {
		server string
		ca     []byte
		want   bool
	}{
		"https":            {server: "https://127.0.0.1:7777", ca: []byte(pem), want: true},
		"plain http":       {server: "http://127.0.0.1:7777", ca: []byte(pem)},
		"https, no pinned": {server: "https://fleet.example.com"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cp := newFakeControlPlane()
			dir := agentDir(t)
			spec := shell("r1", `if [ -n "$GPUFLEET_CA" ]; then echo "ca=$GPUFLEET_CA"; cat "$GPUFLEET_CA"; else echo no-ca; fi`)
			spec.Env["GPUFLEET_SERVER"] = tc.server
			cp.setDesired(spec)
			startAgent(t, newTestAgent(t, cp, dir, func(c *Config) { c.ServerCA = tc.ca }))
			waitPhase(t, cp, "r1", agentapi.PhaseExited)
			l, _ := cp.endLog("r1")
			out := string(l.data)
			if !tc.want {
				if out != "no-ca\n" {
					t.Errorf("job output = %q, want no-ca", out)
				}
				return
			}
			want := "ca=" + filepath.Join(dir, "work", workReplicas, "r1", ServerCAFile) + "\n" + pem
			if out != want {
				t.Errorf("job output = %q, want %q", out, want)
			}
			if _, ok := spec.Env["GPUFLEET_CA"]; ok {
				t.Error("the agent changed the desired spec's environment in place")
			}
		})
	}
}
