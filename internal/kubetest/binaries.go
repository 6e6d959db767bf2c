package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// binaries are the programs a Bin folder must hold under bin/.
var binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

const buildScript = "tools/kube/build.sh"

// findBin returns the folder of the control plane's binaries (see Start for
// the order), or a reason to skip the test when they are not built.
func findBin(explicit string) (dir, skip string, err error) {
	if explicit == "" {
		explicit = os.Getenv("GPUFLEET_KUBE_BIN")
	}
	if explicit != "" {
		return explicit, "", checkBin(explicit)
	}
	script, err := findBuildScript()
	if err != nil {
		return "", "", err
	}
	// --cached prints the folder only when it is complete (exit 3 when not).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := runScript(ctx, script, "--cached")
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out, "", checkBin(out)
	case errors.As(err, &exit) && exit.ExitCode() == 3:
	default:
		return "", "", fmt.Errorf("running %s --cached: %w", buildScript, err)
	}
	if os.Getenv("CI") != "true" {
		return "", "Kubernetes control-plane binaries are not built: run " + buildScript +
			" once (about 11 minutes on 2 cores; cached under ~/.cache/gpufleet), or set GPUFLEET_KUBE_BIN to the folder it prints", nil
	}
	// CI=true: build them here rather than skip. .ci/run builds them before
	// the tests, so this runs only when a test is run on its own.
	ctx, cancel = context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	out, err = runScript(ctx, script)
	if err != nil {
		return "", "", fmt.Errorf("running %s: %w", buildScript, err)
	}
	return out, "", checkBin(out)
}

// runScript runs build.sh and returns the last line of its stdout (the
// folder); stderr, its progress, ends up in the error.
func runScript(ctx context.Context, script string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return "", fmt.Errorf("%w: %s", err, lastChars(msg, 2000))
		}
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

func lastChars(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// findBuildScript looks for tools/kube/build.sh in the working directory
// (a package folder, under go test) and its parents.
func findBuildScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding %s: %w", buildScript, err)
	}
	for {
		p := filepath.Join(dir, filepath.FromSlash(buildScript))
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s above the working directory; set GPUFLEET_KUBE_BIN", buildScript)
		}
		dir = parent
	}
}

// checkBin reports what a Bin folder lacks.
func checkBin(dir string) error {
	var missing []string
	for _, b := range binaries {
		if st, err := os.Stat(filepath.Join(dir, "bin", b)); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, "bin/"+b)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "stages")); err != nil || !st.IsDir() {
		missing = append(missing, "stages/")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s lacks %s (build it with %s)", dir, strings.Join(missing, ", "), buildScript)
	}
	return nil
}
