package archive

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestGrantsArePerProject: an archive is stored once by content, and each
// project that uploads it holds its own grant; another project's upload of
// other bytes, or of none, grants nothing.
func TestGrantsArePerProject(t *testing.T) {
	t.Parallel()
	s, err := NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(body string) string {
		t.Helper()
		d, err := s.Put(strings.NewReader(body), "")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	shared, onlyA := put("same bytes"), put("a's bytes")
	if again := put("same bytes"); again != shared {
		t.Fatalf("the same bytes have two addresses: %s, %s", shared, again)
	}
	never := DigestPrefix + strings.Repeat("ab", 32)
	for _, g := range []struct{ project, digest string }{{"a", shared}, {"b", shared}, {"a", onlyA}, {"a", onlyA}, {"c", never}} {
		if err := s.Grant(g.project, g.digest); err != nil {
			t.Fatalf("Grant(%s, %s): %v", g.project, g.digest, err)
		}
	}
	got := map[string]bool{}
	for _, p := range []string{"a", "b", "c"} {
		for name, d := range map[string]string{"shared": shared, "onlyA": onlyA, "never": never} {
			ok, err := s.Granted(p, d)
			if err != nil {
				t.Fatalf("Granted(%s, %s): %v", p, name, err)
			}
			if ok {
				got[p+"/"+name] = true
			}
		}
	}
	// "c/never": a grant of bytes the store does not hold names nothing.
	want := map[string]bool{"a/shared": true, "b/shared": true, "a/onlyA": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("grants (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", "..", "a/b", "x\x00"} {
		if err := s.Grant(bad, shared); err == nil {
			t.Errorf("Grant(%q) was accepted", bad)
		}
	}
}
