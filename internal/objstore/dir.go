package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Dir is a Store in a folder of a shared filesystem (NFS, a cluster
// filesystem, or a local disk for one machine). Each key is a file under
// the folder; a Put writes a temporary file beside its target, syncs it and
// renames it into place, so readers see the old object or the new one.
type Dir struct {
	root string
}

var _ Store = (*Dir)(nil)

// tmpPrefix marks Put's temporary files; List skips them.
const tmpPrefix = ".tmp-"

// NewDir returns a Store in root, which must exist (ErrNoBucket otherwise):
// a missing shared mount must not silently become a local folder.
func NewDir(root string) (*Dir, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("storage path %q: must be absolute", root)
	}
	info, err := os.Stat(root)
	if err != nil {
		return nil, &ObjectError{Op: "open", Store: root, Err: fmt.Errorf("%w: %w", ErrNoBucket, err)}
	}
	if !info.IsDir() {
		return nil, &ObjectError{Op: "open", Store: root, Err: fmt.Errorf("%w: not a folder", ErrNoBucket)}
	}
	return &Dir{root: filepath.Clean(root)}, nil
}

func (d *Dir) String() string { return d.root }

// CheckKey reports why key is not a valid object key, or nil: keys are
// relative, slash-separated, without empty, "." or ".." segments.
func CheckKey(key string) error {
	if key == "" || len(key) > 1024 {
		return errors.New("key must be 1 to 1024 bytes")
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("key %q: empty, '.' or '..' segment", key)
		}
		if strings.HasPrefix(seg, tmpPrefix) {
			return fmt.Errorf("key %q: segments must not start with %q", key, tmpPrefix)
		}
	}
	return nil
}

func (d *Dir) path(op, key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", &ObjectError{Op: op, Store: d.root, Key: key, Err: err}
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

func (d *Dir) fail(op, key string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, fs.ErrPermission):
		err = fmt.Errorf("%w: %w", ErrAccessDenied, err)
	}
	return &ObjectError{Op: op, Store: d.root, Key: key, Err: err}
}

// Put implements Store.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader, size int64) (Info, error) {
	p, err := d.path("put", key)
	if err != nil {
		return Info{}, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return Info{}, d.fail("put", key, err)
	}
	f, err := os.CreateTemp(filepath.Dir(p), tmpPrefix+"*")
	if err != nil {
		return Info{}, d.fail("put", key, err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), ctxReader{ctx, r})
	if err != nil {
		return Info{}, d.fail("put", key, err)
	}
	if size >= 0 && n != size {
		return Info{}, d.fail("put", key, fmt.Errorf("read %d bytes, want %d", n, size))
	}
	if err := f.Sync(); err != nil {
		return Info{}, d.fail("put", key, err)
	}
	if err := f.Close(); err != nil {
		return Info{}, d.fail("put", key, err)
	}
	if err := ctx.Err(); err != nil {
		return Info{}, d.fail("put", key, err)
	}
	if err := os.Rename(f.Name(), p); err != nil {
		return Info{}, d.fail("put", key, err)
	}
	done = true
	if dir, err := os.Open(filepath.Dir(p)); err == nil {
		dir.Sync() // the rename survives a crash; best effort on filesystems without it
		dir.Close()
	}
	info, err := os.Stat(p)
	if err != nil {
		return Info{}, d.fail("put", key, err)
	}
	return Info{Key: key, Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), Modified: info.ModTime()}, nil
}

// Get implements Store.
func (d *Dir) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := d.path("get", key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, d.fail("get", key, err)
	}
	return f, nil
}

// Stat implements Store.
func (d *Dir) Stat(ctx context.Context, key string) (Info, error) {
	p, err := d.path("stat", key)
	if err != nil {
		return Info{}, err
	}
	info, err := os.Stat(p)
	if err != nil {
		return Info{}, d.fail("stat", key, err)
	}
	if info.IsDir() {
		return Info{}, d.fail("stat", key, fmt.Errorf("%w: a folder", ErrNotFound))
	}
	return Info{Key: key, Size: info.Size(), Modified: info.ModTime(), ETag: dirETag(info)}, nil
}

// List implements Store.
func (d *Dir) List(ctx context.Context, prefix string, fn func(Info) bool) error {
	return d.list(ctx, prefix, "", fn)
}

// list lists the keys with prefix after after, not descending into
// folders whose keys all sort before it.
func (d *Dir) list(ctx context.Context, prefix, after string, fn func(Info) bool) error {
	var all []Info
	err := filepath.WalkDir(d.root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(d.root, p)
		key := filepath.ToSlash(rel)
		if e.IsDir() {
			// Descend only into folders that can hold a key with prefix.
			if key != "." && !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			if key != "." && after != "" && key+"/" < after && !strings.HasPrefix(after, key+"/") {
				return fs.SkipDir // every key in it sorts before after
			}
			return nil
		}
		if strings.HasPrefix(e.Name(), tmpPrefix) || !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted meanwhile
			}
			return err
		}
		all = append(all, Info{Key: key, Size: info.Size(), Modified: info.ModTime(), ETag: dirETag(info)})
		return nil
	})
	if err != nil {
		return d.fail("list", prefix, err)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Key < all[j].Key })
	for _, i := range all {
		if !fn(i) {
			break
		}
	}
	return nil
}

// Delete implements Store.
func (d *Dir) Delete(ctx context.Context, key string) error {
	p, err := d.path("delete", key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return d.fail("delete", key, err)
	}
	// Empty folders left behind are removed up to the root.
	for dir := filepath.Dir(p); dir != d.root && strings.HasPrefix(dir, d.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

// ctxReader fails reads once ctx is done, so a long copy stops promptly.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
