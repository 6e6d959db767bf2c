package sqlite

import (
	"os"
	"syscall"
)

// datasync flushes f's data: fdatasync, as the commit mark keeps its size
// and its data is all there is to flush, at less cost than fsync.
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
