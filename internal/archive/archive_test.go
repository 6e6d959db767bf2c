package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "-> " + target
		case info.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			out[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPackUnpackRoundTrip(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, map[string]string{"train.py": "print('hi')\n", "conf/a.yaml": "lr: 3e-4\n", "data/.keep": ""})
	if err := os.Symlink("conf/a.yaml", filepath.Join(src, "config.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "escape")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	digest, err := Pack(src, &buf, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if d2, _ := Pack(src, &again, Limits{}); d2 != digest {
		t.Fatal("packing the same tree twice gave different digests")
	}
	dest := filepath.Join(t.TempDir(), "work")
	got, err := Unpack(bytes.NewReader(buf.Bytes()), dest, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got != digest {
		t.Fatalf("unpack digest %s, pack digest %s", got, digest)
	}
	want := map[string]string{"train.py": "print('hi')\n", "conf/a.yaml": "lr: 3e-4\n", "data/.keep": "", "config.yaml": "-> conf/a.yaml"}
	if diff := cmp.Diff(want, readTree(t, dest)); diff != "" {
		t.Fatalf("unpacked tree (-want +got):\n%s (the link out of the tree must be left out)", diff)
	}
}

func TestPackLimits(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, map[string]string{"a": "0123456789", "b": "0123456789"})
	if _, err := Pack(src, &bytes.Buffer{}, Limits{MaxBytes: 15}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over MaxBytes: %v, want ErrTooLarge", err)
	}
	if _, err := Pack(src, &bytes.Buffer{}, Limits{MaxEntries: 1}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over MaxEntries: %v, want ErrTooLarge", err)
	}
}

type entry struct {
	hdr  tar.Header
	body string
}

func build(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if e.body != "" {
			_, _ = tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

func file(name, body string) entry {
	return entry{tar.Header{Name: name, Typeflag: tar.TypeReg}, body}
}

func TestUnpackRefusesEscapes(t *testing.T) {
	tests := map[string][]entry{
		"absolute path":        {file("/etc/evil", "x")},
		"dot dot":              {file("../evil", "x")},
		"dot dot inside":       {file("a/../../evil", "x")},
		"backslash dot dot":    {file(`..\evil`, "x")},
		"link out":             {{tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../etc"}, ""}},
		"absolute link":        {{tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, ""}},
		"write through a link": {{tar.Header{Name: "d", Typeflag: tar.TypeSymlink, Linkname: "."}, ""}, file("d/x", "x")},
		"replace a link":       {{tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "a"}, ""}, file("l", "x")},
		"hard link":            {file("a", "x"), {tar.Header{Name: "b", Typeflag: tar.TypeLink, Linkname: "a"}, ""}},
		"device":               {{tar.Header{Name: "null", Typeflag: tar.TypeChar}, ""}},
		"root itself":          {file(".", "x")},
		// d/l → ".." is the root, but "d/l/.." is its parent: lexically
		// "d", physically outside (a fuzzer's find).
		"climb through a link": {{tar.Header{Name: "d/", Typeflag: tar.TypeDir}, ""}, {tar.Header{Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: ".."}, ""},
			{tar.Header{Name: "l2", Typeflag: tar.TypeSymlink, Linkname: "d/l/.."}, ""}},
		"climb after descending": {{tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "a/../b"}, ""}},
	}
	for name, entries := range tests {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dest := filepath.Join(parent, "work")
			_, err := Unpack(bytes.NewReader(build(t, entries...)), dest, Limits{})
			if !errors.Is(err, ErrUnsafe) {
				t.Fatalf("err = %v, want ErrUnsafe", err)
			}
			outside, _ := os.ReadDir(parent)
			if len(outside) != 1 {
				t.Fatalf("something was written beside the destination: %v", outside)
			}
		})
	}
}

func TestUnpackLimits(t *testing.T) {
	big := build(t, file("a", "0123456789"), file("b", "0123456789"))
	if _, err := Unpack(bytes.NewReader(big), t.TempDir(), Limits{MaxBytes: 15}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over MaxBytes: %v", err)
	}
	if _, err := Unpack(bytes.NewReader(big), t.TempDir(), Limits{MaxEntries: 1}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over MaxEntries: %v", err)
	}
}

// FuzzUnpack feeds arbitrary archives to Unpack: it must never panic and
// never create anything outside its destination.
func FuzzUnpack(f *testing.F) {
	f.Add(build(f, file("ok", "x")))
	f.Add(build(f, file("../x", "x")))
	f.Add(build(f, entry{tar.Header{Name: "d", Typeflag: tar.TypeSymlink, Linkname: "."}, ""}, file("d/x", "x")))
	f.Add([]byte("not gzip"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dest := filepath.Join(parent, "work")
		_, _ = Unpack(bytes.NewReader(data), dest, Limits{MaxBytes: 1 << 20, MaxEntries: 100})
		entries, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != "work" {
				t.Fatalf("Unpack wrote %q outside its destination", e.Name())
			}
		}
	})
}
