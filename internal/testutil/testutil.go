// Package testutil holds small helpers that tests of several packages
// share. Nothing outside tests imports it.
package testutil

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use: a logger, a child
// process's output and the test reading it may share one.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ModuleRoot is the directory of the go.mod above the test's working
// directory (the package's own): the root of the module's source tree.
func ModuleRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			tb.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}
