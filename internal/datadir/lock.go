// Package datadir guards a server's data directory: one server at a time
// uses it (DESIGN.md §5). A second server on the same directory would
// write the same SQLite database beside the first, overwrite its
// server.json and delete it on exit, so it is refused at start with an
// error that names the process holding the directory.
//
// The guard is an exclusive flock(2) on LockFile, held for the life of the
// server (the kernel drops it when the process ends, however it ends, so
// a crash never leaves a stale lock), and PIDFile beside it naming the
// holder for the error message.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const (
	// LockFile is flocked by the server that uses the directory. It is
	// never removed: removing a flocked file lets a third process lock a
	// new file of the same name while the first still runs.
	LockFile = "server.lock"
	// PIDFile holds the pid of the server holding the lock.
	PIDFile = "server.pid"
)

// HeldError says that another process holds the directory.
type HeldError struct {
	Dir string
	// PID is the holder's process id, 0 when its pid file was not
	// readable (it is written just after the lock is taken).
	PID int
}

func (e *HeldError) Error() string {
	who := "another gpufleet server"
	if e.PID > 0 {
		who = fmt.Sprintf("another gpufleet server (pid %d)", e.PID)
	}
	return fmt.Sprintf("data dir %s is in use by %s: stop that server first, or give this one another --data-dir", e.Dir, who)
}

// Lock holds a data directory.
type Lock struct {
	dir string
	f   *os.File
}

// Acquire takes the data directory dir for this process, creating it (mode
// 0700) when it does not exist, and records this process's pid beside the
// lock. It does not wait: when another process holds dir it returns a
// *HeldError at once.
func Acquire(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &HeldError{Dir: dir, PID: Holder(dir)}
		}
		return nil, fmt.Errorf("locking data dir %s: %w", dir, err)
	}
	tmp := filepath.Join(dir, PIDFile+".tmp")
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err == nil {
		err = os.Rename(tmp, filepath.Join(dir, PIDFile))
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("recording the data dir's holder: %w", err)
	}
	return &Lock{dir: dir, f: f}, nil
}

// Holder returns the pid recorded by the process that holds (or last held)
// dir, or 0 when none is recorded.
func Holder(dir string) int {
	data, err := os.ReadFile(filepath.Join(dir, PIDFile))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// Release gives the directory up: the pid file goes, then the lock. It is
// safe to call more than once.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := os.Remove(filepath.Join(l.dir, PIDFile))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	err = errors.Join(err, l.f.Close())
	l.f = nil
	return err
}
