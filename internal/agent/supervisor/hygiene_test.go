package supervisor_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpufleet/gpufleet/internal/agent/runtime"
)

// TestOutputPastItsLimitKeepsTheEnd: a replica that writes far more than
// its log limit leaves the first part, a note of the cut and the last part.
func TestOutputPastItsLimitKeepsTheEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sb := &runtime.Sandbox{Runtime: runtime.Process, Home: dir, Work: dir, Workdir: dir, LogLimit: 4096}
	r := startIn(t, dir, spec("sh", "-c", `i=0; while [ $i -lt 20000 ]; do echo "line $i"; i=$((i+1)); done; exit 4`), sb)
	if exit := r.exit(t); exit.Code != 4 {
		t.Fatalf("exit code %d, want 4", exit.Code)
	}
	log := r.read(t, "output.log")
	head, tail, ok := strings.Cut(log, "\n[gpufleet: output passed its limit of 4096 bytes;")
	if !ok {
		t.Fatalf("no note of the cut in a %d-byte log:\n%.300s", len(log), log)
	}
	if len(head) != 4096 || !strings.HasPrefix(head, "line 0\nline 1\n") {
		t.Errorf("the log's first part is %d bytes starting %.20q; want the first 4096 bytes", len(head), head)
	}
	if !strings.HasSuffix(tail, "line 19998\nline 19999\n") {
		t.Errorf("the log does not end with the output's last lines: ...%q", tail[max(0, len(tail)-40):])
	}
	if len(log) > 3*4096 {
		t.Errorf("the log is %d bytes; the limit was 4096 (plus the kept end)", len(log))
	}
}

// TestFullDiskStillRecordsTheExit: a replica that fills the disk its
// replica directory is on still gets its exit record, so it is reported
// as exited with its real code rather than lost and rerun.
func TestFullDiskStillRecordsTheExit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=512k"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mounting a tmpfs: %v", err)
		}
		t.Skipf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	sb := &runtime.Sandbox{Runtime: runtime.Process, Home: dir, Work: dir, Workdir: "/", LogLimit: 64 << 20}
	// 2 MiB of output into a 512 KiB file system, then exit 7.
	r := startIn(t, dir, spec("sh", "-c", `yes 0123456789abcdef0123456789abcdef | head -c 2097152; exit 7`), sb)
	exit := r.exit(t)
	if exit.Code != 7 {
		t.Fatalf("exit code %d, want 7", exit.Code)
	}
	// The note of the lost bytes is best effort: the disk is still full.
	if log := r.read(t, "output.log"); len(log) >= 2<<20 {
		t.Errorf("the log holds %d bytes on a 512 KiB file system", len(log))
	}
}
