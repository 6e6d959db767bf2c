package supervisor_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/runtime"
)

// BenchmarkReplicaStart measures what a user waits for: from launching the
// supervisor of a replica to its command's first output, then its exit
// recorded, under the process runtime (as a workload user when root) and
// the container runtime (rootful podman, runc, a busybox image). It
// reports p50 and p99 of the start-to-first-output time.
func BenchmarkReplicaStart(b *testing.B) {
	var user *runtime.User
	if os.Geteuid() == 0 {
		user = &runtime.User{UID: 2_100_000_000, GID: 2_100_000_000}
	}
	b.Run("runtime=process", func(b *testing.B) {
		benchStarts(b, func(dir string) *runtime.Sandbox {
			os.Chmod(dir, 0o711)
			os.Chmod(filepath.Dir(dir), 0o711)
			work := filepath.Join(dir, "work")
			os.Mkdir(work, 0o700)
			if user != nil {
				runtime.Own(work, *user)
			}
			return &runtime.Sandbox{Runtime: runtime.Process, User: user, Home: work, Work: work, Workdir: work}
		})
	})
	b.Run("runtime=container", func(b *testing.B) {
		p, ok, why := runtime.DetectPodman(b.Context(), "")
		if !ok {
			b.Skip(why)
		}
		image := benchImage(b, p)
		nofile, nproc := runtime.HardLimits()
		i := 0
		benchStarts(b, func(dir string) *runtime.Sandbox {
			i++
			home := filepath.Join(dir, "home")
			os.Mkdir(home, 0o700)
			return &runtime.Sandbox{Runtime: runtime.Container, User: user, Home: home, Work: home, Workdir: runtime.MountRoot,
				Container: &runtime.ContainerSpec{Podman: p.Path, OCIRuntime: p.OCIRuntime, Name: "gpufleet-bench-" + strings.ReplaceAll(filepath.Base(dir), ".", "") + "-" + strconv.Itoa(i),
					Image: image, Network: "none", ReadOnly: true, NoFile: nofile, NProc: nproc}}
		})
	})
}

func benchStarts(b *testing.B, sandbox func(dir string) *runtime.Sandbox) {
	var took []time.Duration
	for b.Loop() {
		dir := b.TempDir()
		sb := sandbox(dir)
		t0 := time.Now()
		r := startIn(b, dir, spec("sh", "-c", "echo ready"), sb)
		for {
			data, _ := os.ReadFile(filepath.Join(dir, "output.log"))
			if strings.Contains(string(data), "ready") {
				break
			}
			if time.Since(t0) > time.Minute {
				b.Fatalf("no output after a minute: %s", data)
			}
			time.Sleep(time.Millisecond)
		}
		took = append(took, time.Since(t0))
		<-r.done
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[min(len(took)-1, len(took)*99/100)].Microseconds())/1000, "p99-ms")
}

// benchImage builds a one-layer busybox image for the benchmark.
func benchImage(b *testing.B, p runtime.Podman) string {
	const name = "localhost/gpufleet-bench/busybox:1"
	if exec.Command(p.Path, "image", "exists", name).Run() == nil {
		return name
	}
	ctx := b.TempDir()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		b.Skip("busybox-static is not installed")
	}
	data, _ := os.ReadFile(bb)
	os.WriteFile(filepath.Join(ctx, "busybox"), data, 0o755)
	os.WriteFile(filepath.Join(ctx, "Containerfile"), []byte("FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n"), 0o644)
	var out strings.Builder
	if err := runtime.Build(b.Context(), p, runtime.BuildOptions{Context: ctx, Tag: name}, &out); err != nil {
		b.Fatalf("%v\n%s", err, out.String())
	}
	return name
}
