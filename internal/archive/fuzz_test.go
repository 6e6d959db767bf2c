package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tarOf builds an uncompressed tar stream, for seeds.
func tarOf(tb testing.TB, entries ...*tar.Header) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = 2
		}
		if err := tw.WriteHeader(h); err != nil {
			tb.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			_, _ = tw.Write([]byte("hi"))
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzUnpackTar feeds arbitrary tar streams (gzipped here, so the fuzzer
// mutates tar structure) to Unpack: it must never panic, never write
// outside its destination, and never leave a link that resolves outside it.
func FuzzUnpackTar(f *testing.F) {
	reg := func(name string) *tar.Header { return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644} }
	f.Add(tarOf(f, &tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, reg("d/a.txt")))
	f.Add(tarOf(f, reg("../escape")))
	f.Add(tarOf(f, reg("/abs")))
	f.Add(tarOf(f, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: ".."}, reg("l/x")))
	f.Add(tarOf(f, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}))
	f.Add(tarOf(f, &tar.Header{Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: "../../x"}))
	f.Add(tarOf(f, reg("a"), &tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "../a"}))
	f.Add(tarOf(f, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d"}, &tar.Header{Name: "d", Typeflag: tar.TypeSymlink, Linkname: ".."}, reg("l/x")))
	f.Fuzz(func(t *testing.T, raw []byte) {
		parent := t.TempDir()
		dest := filepath.Join(parent, "tree")
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, _ = zw.Write(raw)
		_ = zw.Close()
		_, _ = Unpack(&gz, dest, Limits{MaxBytes: 1 << 20, MaxEntries: 64})

		outside, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		if len(outside) != 1 || outside[0].Name() != "tree" {
			var names []string
			for _, e := range outside {
				names = append(names, e.Name())
			}
			t.Fatalf("Unpack wrote beside its destination: %v", names)
		}
		root, err := filepath.EvalSymlinks(dest)
		if err != nil {
			t.Fatal(err)
		}
		// WalkDir does not follow links, so only a link can lead out: resolve
		// those (resolving every path of a deep tree is cubic in its depth).
		err = filepath.WalkDir(dest, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type()&os.ModeSymlink == 0 {
				return nil
			}
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				return nil // a dangling link inside the tree reaches nothing
			}
			if real != root && !strings.HasPrefix(real, root+string(filepath.Separator)) {
				t.Fatalf("%s resolves to %s, outside %s", p, real, root)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
