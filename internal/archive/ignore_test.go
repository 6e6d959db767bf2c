package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestPackLeavesOutIgnoredFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string]string{
		".gitignore":        "*.ckpt\n/data/\n!keep.ckpt\n",
		"sub/.gitignore":    "local.txt\n",
		".gpufleetignore":   "# big things\nwandb/\nkeep.ckpt\n",
		".git/config":       "[core]\n",
		"train.py":          "print(1)\n",
		"model.ckpt":        "weights",
		"keep.ckpt":         "re-ignored by .gpufleetignore",
		"data/x.bin":        "data",
		"sub/data/y.txt":    "not the top data/",
		"sub/local.txt":     "ignored by sub/.gitignore",
		"sub/kept.txt":      "kept",
		"wandb/run/log.txt": "ignored",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	skip, err := Ignore(dir)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, st, err := PackStats(dir, &buf, Limits{Skip: skip})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			got = append(got, h.Name)
		}
	}
	slices.Sort(got)
	want := []string{".gitignore", ".gpufleetignore", "sub/.gitignore", "sub/data/y.txt", "sub/kept.txt", "train.py"}
	if !slices.Equal(got, want) {
		t.Errorf("packed %v, want %v", got, want)
	}
	if st.Files != len(want) || st.Skipped != 6 { // .git, model.ckpt, keep.ckpt, data, sub/local.txt, wandb
		t.Errorf("stats = %+v, want %d files and 6 entries skipped", st, len(want))
	}
}

func TestPackRefusesAFileOverTheLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), make([]byte, 2048), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Pack(dir, io.Discard, Limits{MaxFileBytes: 1024}); !errors.Is(err, ErrFileTooLarge) {
		t.Errorf("packing a 2 KiB file under a 1 KiB limit: %v, want ErrFileTooLarge", err)
	}
	if _, err := Pack(dir, io.Discard, Limits{}); err != nil {
		t.Errorf("without a per-file limit: %v", err)
	}
}
