//go:build !linux

package sqlite

import "os"

// datasync flushes f (fsync where fdatasync is not available).
func datasync(f *os.File) error { return f.Sync() }
