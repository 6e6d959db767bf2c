package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAcquireIsExclusive: while one holder has the directory a second is
// refused with the holder's pid; once it lets go, the next one gets it.
func TestAcquireIsExclusive(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to an open file, so a second open in this
	// process contends just as another process would.
	_, err = Acquire(dir)
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("second Acquire: %v, want a HeldError", err)
	}
	if diff := cmp.Diff(&HeldError{Dir: dir, PID: os.Getpid()}, held); diff != "" {
		t.Fatalf("held error (-want +got):\n%s", diff)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if got := Holder(dir); got != 0 {
		t.Fatalf("holder after release = %d, want none", got)
	}
	second, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after release: %v", err)
	}
	if err := second.Release(); err != nil {
		t.Fatal(err)
	}
	if err := second.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
}
