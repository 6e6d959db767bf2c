// Package archive packs a job's working directory into a size-limited,
// content-addressed tar.gz and unpacks it on a node without ever writing
// outside the destination: absolute paths, "..", links that point out of the
// tree, device files and hard links are refused (the Zip Slip class of bugs),
// and limits on total size and entry count stop archive bombs.
package archive

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Limits bound what Pack writes and Unpack accepts. Zero fields take the
// defaults.
type Limits struct {
	// MaxBytes bounds the sum of file sizes, uncompressed (default 256 MiB).
	MaxBytes int64
	// MaxEntries bounds files, folders and links (default 100,000).
	MaxEntries int
	// MaxFileBytes, when above 0, refuses any one file larger (Pack).
	MaxFileBytes int64
	// Skip, when set, leaves out of Pack the entries it returns true for
	// (a folder with all it holds), given their path from the top in
	// parts (see Ignore).
	Skip func(rel []string, isDir bool) bool
}

// Stats is what Pack packed and left out.
type Stats struct {
	Files   int   // regular files
	Bytes   int64 // their sizes, uncompressed
	Skipped int   // entries Skip left out (a folder counts once)
}

// ErrFileTooLarge marks a file over Limits.MaxFileBytes.
var ErrFileTooLarge = errors.New("file over the size limit")

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = 256 << 20
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = 100_000
	}
	return l
}

// ErrUnsafe marks an archive that tries to escape its destination or holds
// something a job directory must not (devices, hard links).
var ErrUnsafe = errors.New("unsafe archive entry")

// ErrTooLarge marks an archive or directory over its Limits.
var ErrTooLarge = errors.New("archive over its limits")

// Pack writes dir as a gzip-compressed tar to w and returns the archive's
// SHA-256 (hex), its content address. Entries are sorted and carry no owner
// or timestamps, so the same tree always gives the same digest. Symbolic
// links are kept only when they point inside dir.
func Pack(dir string, w io.Writer, lim Limits) (string, error) {
	digest, _, err := PackStats(dir, w, lim)
	return digest, err
}

// PackStats is Pack, also returning what it packed and skipped.
func PackStats(dir string, w io.Writer, lim Limits) (string, Stats, error) {
	var st Stats
	digest, err := pack(dir, w, lim, &st)
	return digest, st, err
}

func pack(dir string, w io.Writer, lim Limits, st *Stats) (string, error) {
	lim = lim.withDefaults()
	root, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", dir, err)
	}
	var paths []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root && lim.Skip != nil {
			rel := strings.Split(filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator))), "/")
			if lim.Skip(rel, d.IsDir()) {
				st.Skipped++
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		if p != root {
			paths = append(paths, p)
		}
		if len(paths) > lim.MaxEntries {
			return fmt.Errorf("%s has more than %d entries: %w", dir, lim.MaxEntries, ErrTooLarge)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", dir, err)
	}
	sort.Strings(paths)
	h := sha256.New()
	gz := gzip.NewWriter(io.MultiWriter(w, h))
	tw := tar.NewWriter(gz)
	var total int64
	for _, p := range paths {
		rel := filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator)))
		info, err := os.Lstat(p)
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", rel, err)
		}
		hdr := &tar.Header{Name: rel, Mode: int64(info.Mode().Perm()), Format: tar.FormatPAX}
		switch {
		case info.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		case info.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
			if lim.MaxFileBytes > 0 && info.Size() > lim.MaxFileBytes {
				return "", fmt.Errorf("%s is %d bytes, over the %d-byte limit per file (ignore it in .gpufleetignore, or raise the limit): %w", rel, info.Size(), lim.MaxFileBytes, ErrFileTooLarge)
			}
			st.Files++
			st.Bytes += info.Size()
			total += info.Size()
			if total > lim.MaxBytes {
				return "", fmt.Errorf("%s holds more than %d bytes (leave data sets out of the workdir): %w", dir, lim.MaxBytes, ErrTooLarge)
			}
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return "", fmt.Errorf("reading link %s: %w", rel, err)
			}
			if !linkInside(rel, target) {
				continue // a link out of the tree would not exist on the node
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		default:
			continue // sockets, devices, pipes have no place in a workdir
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return "", fmt.Errorf("writing %s: %w", rel, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if err := copyFile(tw, p, hdr.Size); err != nil {
				return "", fmt.Errorf("writing %s: %w", rel, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("finishing archive: %w", err)
	}
	if err := gz.Close(); err != nil {
		return "", fmt.Errorf("finishing archive: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func copyFile(w io.Writer, p string, size int64) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	// Copy exactly the size in the header: a file that grew meanwhile would
	// otherwise corrupt the tar stream.
	_, err = io.CopyN(w, f, size)
	return err
}

// linkInside reports whether a symlink at rel (slash-separated, relative to
// the root) pointing at target stays inside the root.
//
// Lexical cleaning alone is not enough: in "d/l/.." the ".." applies to
// wherever the link d/l points, not to d, so "d/l/.." with d/l → ".."
// cleans to "d" yet resolves above the root (a fuzzer's find, kept as the
// seed seed-symlink-chain-out). So ".." may only lead the target, where it
// climbs the link's own folders, which are real folders (checkParents):
// a target that climbs after descending is refused.
func linkInside(rel, target string) bool {
	slashed := filepath.ToSlash(target)
	if path.IsAbs(slashed) || filepath.IsAbs(target) || filepath.VolumeName(target) != "" || strings.ContainsRune(target, 0) {
		return false
	}
	descended := false
	for _, part := range strings.Split(strings.ReplaceAll(slashed, `\`, "/"), "/") {
		switch part {
		case "", ".":
		case "..":
			if descended {
				return false
			}
		default:
			descended = true
		}
	}
	resolved := path.Clean(path.Join(path.Dir(rel), slashed))
	return resolved != ".." && !strings.HasPrefix(resolved, "../")
}

// Unpack extracts a Pack archive from r into dest, which must not exist or
// be empty. Every entry's path is resolved and checked before anything is
// written; the first unsafe entry stops the unpacking with ErrUnsafe. It
// returns the SHA-256 of what it read, to compare with the content address.
func Unpack(r io.Reader, dest string, lim Limits) (string, error) {
	lim = lim.withDefaults()
	if err := os.MkdirAll(dest, 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", dest, err)
	}
	root, err := filepath.Abs(dest)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", dest, err)
	}
	h := sha256.New()
	gz, err := gzip.NewReader(io.TeeReader(r, h))
	if err != nil {
		return "", fmt.Errorf("reading archive: %w", err)
	}
	tr := tar.NewReader(gz)
	var total int64
	for entries := 0; ; entries++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("reading archive: %w", err)
		}
		if entries >= lim.MaxEntries {
			return "", fmt.Errorf("archive has more than %d entries: %w", lim.MaxEntries, ErrTooLarge)
		}
		target, err := safeJoin(root, hdr.Name)
		if err != nil {
			return "", err
		}
		if err := checkParents(root, target); err != nil {
			return "", err
		}
		mode := fs.FileMode(hdr.Mode).Perm() &^ 0o022 // never group- or world-writable
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, mode|0o700); err != nil {
				return "", fmt.Errorf("creating %s: %w", hdr.Name, err)
			}
		case tar.TypeReg:
			total += hdr.Size
			if hdr.Size < 0 || total > lim.MaxBytes {
				return "", fmt.Errorf("archive unpacks to more than %d bytes: %w", lim.MaxBytes, ErrTooLarge)
			}
			if err := writeFile(target, tr, hdr.Size, mode|0o600); err != nil {
				return "", fmt.Errorf("writing %s: %w", hdr.Name, err)
			}
		case tar.TypeSymlink:
			rel := strings.TrimPrefix(filepath.ToSlash(strings.TrimPrefix(target, root)), "/")
			if !linkInside(rel, hdr.Linkname) {
				return "", fmt.Errorf("%s links to %q outside the tree: %w", hdr.Name, hdr.Linkname, ErrUnsafe)
			}
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return "", fmt.Errorf("linking %s: %w", hdr.Name, err)
			}
		default:
			return "", fmt.Errorf("%s is a %s entry (only files, folders and links inside the tree are allowed): %w", hdr.Name, typeName(hdr.Typeflag), ErrUnsafe)
		}
	}
	// Drain so the digest covers the whole stream, trailing padding included.
	if _, err := io.Copy(io.Discard, gz); err != nil {
		return "", fmt.Errorf("reading archive: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// safeJoin resolves name under root lexically and refuses anything that
// would land outside it.
func safeJoin(root, name string) (string, error) {
	if name == "" || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("entry with an empty or NUL name: %w", ErrUnsafe)
	}
	slashed := strings.ReplaceAll(name, `\`, "/")
	if path.IsAbs(slashed) || filepath.IsAbs(name) || filepath.VolumeName(name) != "" {
		return "", fmt.Errorf("%q is an absolute path: %w", name, ErrUnsafe)
	}
	clean := path.Clean(slashed)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%q leaves the tree: %w", name, ErrUnsafe)
	}
	if clean == "." {
		return "", fmt.Errorf("%q names the root itself: %w", name, ErrUnsafe)
	}
	return filepath.Join(root, filepath.FromSlash(clean)), nil
}

// checkParents refuses a target whose existing parent folders include a
// symbolic link: an earlier entry could otherwise plant a link and a later
// one write through it.
func checkParents(root, target string) error {
	if info, err := os.Lstat(target); err == nil && info.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s would replace a link: %w", target, ErrUnsafe)
	}
	rel, err := filepath.Rel(root, filepath.Dir(target))
	if err != nil {
		return fmt.Errorf("resolving %s: %w", target, err)
	}
	if rel == "." {
		return nil
	}
	cur := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		info, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // the rest is created by this unpacking, as folders
		}
		if err != nil {
			return fmt.Errorf("checking %s: %w", cur, err)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s would be written through the link %s: %w", target, cur, ErrUnsafe)
		}
	}
	return nil
}

func writeFile(target string, r io.Reader, size int64, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return err
	}
	// O_EXCL: never follow or overwrite what an earlier entry made.
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, r, size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func typeName(t byte) string {
	switch t {
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar, tar.TypeBlock:
		return "device"
	case tar.TypeFifo:
		return "pipe"
	}
	return fmt.Sprintf("type %q", t)
}
