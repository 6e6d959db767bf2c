package api

import (
	"testing"
	"time"
)

// TestOpenAPIBuiltOnce: the document is built once per version and
// reused (a new leader's API must not build it again on its takeover).
func TestOpenAPIBuiltOnce(t *testing.T) {
	began := time.Now()
	build, err := buildOpenAPI("once-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("building the document took %s", time.Since(began))
	a, err := OpenAPI("once-test")
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenAPI("once-test")
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(build) {
		t.Fatal("the memoised document differs from a fresh build")
	}
	if &a[0] != &b[0] {
		t.Error("OpenAPI built the document again for the same version")
	}
	c, err := OpenAPI("once-test-2")
	if err != nil {
		t.Fatal(err)
	}
	if string(c) == string(a) {
		t.Error("another version got the same document")
	}
}
