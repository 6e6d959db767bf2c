// Package logstore keeps the output of every replica on the server's disk, as
// agents ship it: one file per job, attempt and rank, appended at the offsets
// the agent names so a resent chunk is never written twice, and an end marker
// once the agent has sent everything. Readers can follow a log as it grows.
//
// Layout: <dir>/<job id>/<attempt>/<rank>.log and <rank>.eof.
package logstore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// Key names one replica's log.
type Key struct {
	JobID   string
	Attempt int
	Rank    int
}

// Store is safe for concurrent use.
type Store struct {
	dir string

	mu      sync.Mutex
	changed map[Key]chan struct{}
}

// New returns a store rooted at dir, creating it.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating log dir: %w", err)
	}
	return &Store{dir: dir, changed: map[Key]chan struct{}{}}, nil
}

func (s *Store) path(k Key, ext string) (string, error) {
	if k.JobID == "" || filepath.Base(k.JobID) != k.JobID || k.JobID == "." || k.JobID == ".." || k.Attempt < 1 || k.Rank < 0 {
		return "", fmt.Errorf("invalid log key %+v", k)
	}
	return filepath.Join(s.dir, k.JobID, strconv.Itoa(k.Attempt), strconv.Itoa(k.Rank)+ext), nil
}

// Append writes data at offset and returns the log's size afterwards. Bytes
// before the current end are ignored (already stored); a chunk that starts
// past the end is not stored. eof marks the log complete once data reaches
// the end.
func (s *Store) Append(k Key, offset int64, data []byte, eof bool) (int64, error) {
	p, err := s.path(k, ".log")
	if err != nil {
		return 0, err
	}
	// The folder is made only when the file cannot be opened without it:
	// an agent ships a log in many chunks, and a MkdirAll per chunk was a
	// tenth of a busy server's CPU.
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return 0, fmt.Errorf("creating log dir: %w", err)
		}
		f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o600)
	}
	if err != nil {
		return 0, fmt.Errorf("opening log: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("reading log size: %w", err)
	}
	size := st.Size()
	if offset > size {
		return size, nil
	}
	if end := offset + int64(len(data)); end > size {
		if _, err := f.WriteAt(data[size-offset:], size); err != nil {
			return size, fmt.Errorf("writing log: %w", err)
		}
		size = end
	}
	if eof && offset+int64(len(data)) == size {
		ep, _ := s.path(k, ".eof")
		if err := os.WriteFile(ep, nil, 0o600); err != nil {
			return size, fmt.Errorf("marking log complete: %w", err)
		}
	}
	s.notify(k)
	return size, nil
}

// Size returns how much of a log is stored and whether it is complete.
func (s *Store) Size(k Key) (size int64, complete bool, err error) {
	p, err := s.path(k, ".log")
	if err != nil {
		return 0, false, err
	}
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		size = 0
	case err != nil:
		return 0, false, fmt.Errorf("reading log size: %w", err)
	default:
		size = st.Size()
	}
	ep, _ := s.path(k, ".eof")
	_, err = os.Stat(ep)
	return size, err == nil, nil
}

// ReadAt copies the log from offset to w, up to its current end, and returns
// the new offset.
func (s *Store) ReadAt(k Key, offset int64, w io.Writer) (int64, error) {
	p, err := s.path(k, ".log")
	if err != nil {
		return offset, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return offset, nil
	}
	if err != nil {
		return offset, fmt.Errorf("opening log: %w", err)
	}
	defer f.Close()
	n, err := io.Copy(w, io.NewSectionReader(f, offset, 1<<62))
	if err != nil {
		return offset + n, fmt.Errorf("reading log: %w", err)
	}
	return offset + n, nil
}

// Changed returns a channel closed at the log's next append.
func (s *Store) Changed(k Key) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.changed[k]
	if !ok {
		ch = make(chan struct{})
		s.changed[k] = ch
	}
	return ch
}

func (s *Store) notify(k Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.changed[k]; ok {
		close(ch)
		delete(s.changed, k)
	}
}
