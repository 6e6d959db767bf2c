package archive

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DigestPrefix starts a content address: "sha256:" and 64 hex digits.
const DigestPrefix = "sha256:"

// ParseDigest checks a content address and returns its hex part.
func ParseDigest(d string) (string, error) {
	h, ok := strings.CutPrefix(d, DigestPrefix)
	if !ok || len(h) != 2*sha256.Size || strings.ToLower(h) != h {
		return "", fmt.Errorf("%q is not a content address: want sha256: and 64 lower-case hex digits", d)
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("%q is not a content address: want sha256: and 64 lower-case hex digits", d)
	}
	return h, nil
}

// ErrDigestMismatch: the bytes received do not have the content address
// they were sent under (corrupted or truncated in transit).
var ErrDigestMismatch = errors.New("archive does not match its digest")

// Store keeps archives on disk by content address, as <dir>/<hex>.tar.gz,
// and records which projects each was uploaded for, as the empty files
// <dir>/grants/<project>/<hex>: the bytes are stored once, and every
// project that uploaded them holds a grant to name them in a job (the same
// bytes uploaded in two projects are one blob and two grants). Files are
// written to a temporary name and renamed once verified, so a reader never
// sees a partial archive. Safe for concurrent use.
type Store struct {
	dir string
}

// NewStore returns a store in dir, creating it.
func NewStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating archive store: %w", err)
	}
	return &Store{dir: dir}, nil
}

// Put stores what r yields and returns its content address. When want is
// not empty the content must have that address, or nothing is stored and
// the error matches ErrDigestMismatch. Storing an archive twice is harmless.
func (s *Store) Put(r io.Reader, want string) (string, error) {
	if want != "" {
		if _, err := ParseDigest(want); err != nil {
			return "", err
		}
	}
	tmp, err := os.CreateTemp(s.dir, ".upload-*")
	if err != nil {
		return "", fmt.Errorf("storing archive: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), r); err != nil {
		tmp.Close()
		return "", fmt.Errorf("storing archive: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("storing archive: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("storing archive: %w", err)
	}
	got := DigestPrefix + hex.EncodeToString(h.Sum(nil))
	if want != "" && got != want {
		return "", fmt.Errorf("received %s, sent as %s: %w", got, want, ErrDigestMismatch)
	}
	if err := os.Rename(tmp.Name(), s.path(got)); err != nil {
		return "", fmt.Errorf("storing archive: %w", err)
	}
	return got, nil
}

// Open returns the archive with content address d; the error matches
// fs.ErrNotExist when there is none.
func (s *Store) Open(d string) (io.ReadCloser, error) {
	if _, err := ParseDigest(d); err != nil {
		return nil, err
	}
	f, err := os.Open(s.path(d))
	if err != nil {
		return nil, fmt.Errorf("opening archive %s: %w", d, err)
	}
	return f, nil
}

// Grant records that the archive with content address d was uploaded for
// project, which may from now on name it in spec.run.archive. Granting
// twice is harmless. project must be a valid object name (a DNS label), so
// that it is one path element.
func (s *Store) Grant(project, d string) error {
	if err := checkProject(project); err != nil {
		return err
	}
	h, err := ParseDigest(d)
	if err != nil {
		return err
	}
	dir := filepath.Join(s.dir, "grants", project)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("granting archive %s to project %s: %w", d, project, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, h), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("granting archive %s to project %s: %w", d, project, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("granting archive %s to project %s: %w", d, project, err)
	}
	return nil
}

// Granted reports whether the archive with content address d was uploaded
// for project (and is still stored). It says nothing of other projects'
// uploads, so that a caller cannot learn which digests exist elsewhere.
func (s *Store) Granted(project, d string) (bool, error) {
	if err := checkProject(project); err != nil {
		return false, err
	}
	h, err := ParseDigest(d)
	if err != nil {
		return false, err
	}
	for _, p := range []string{filepath.Join(s.dir, "grants", project, h), s.path(d)} {
		switch _, err := os.Stat(p); {
		case errors.Is(err, fs.ErrNotExist):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("checking archive %s in project %s: %w", d, project, err)
		}
	}
	return true, nil
}

// checkProject refuses a project name that is not one plain path element.
func checkProject(p string) error {
	if p == "" || p == "." || p == ".." || strings.ContainsAny(p, `/\`+"\x00") {
		return fmt.Errorf("%q is not a project name", p)
	}
	return nil
}

func (s *Store) path(d string) string {
	return filepath.Join(s.dir, strings.TrimPrefix(d, DigestPrefix)+".tar.gz")
}
