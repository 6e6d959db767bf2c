package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agent/atomicfile"
)

func TestWriteReplacesAndLeavesNoTemporaries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "record.json")
	for _, content := range []string{"first", "second"} {
		if err := atomicfile.Write(path, []byte(content), 0o600); err != nil {
			t.Fatalf("Write(%q): %v", content, err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("second", string(got)); diff != "" {
		t.Errorf("content (-want +got):\n%s", diff)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(os.FileMode(0o600), fi.Mode().Perm()); diff != "" {
		t.Errorf("mode (-want +got):\n%s", diff)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"record.json"}, names); diff != "" {
		t.Errorf("directory entries (-want +got):\n%s", diff)
	}
}

func TestWriteIntoMissingDirectoryFails(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing", "record.json")
	if err := atomicfile.Write(path, []byte("x"), 0o600); err == nil {
		t.Fatal("Write into a missing directory succeeded")
	}
}
