package archive

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
)

// IgnoreFile is gpufleet's own ignore file, in .gitignore's syntax, read
// from the top of the directory packed; its patterns come after (and so
// override) the .gitignore files'.
const IgnoreFile = ".gpufleetignore"

// Ignore returns what Limits.Skip should leave out of dir: the .git
// folder, what its .gitignore files (every folder's, and
// .git/info/exclude) ignore, as git reads them, and what dir's
// .gpufleetignore names.
func Ignore(dir string) (func(rel []string, isDir bool) bool, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	ps, err := gitignore.ReadPatterns(osfs.New(root), nil)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading .gitignore files in %s: %w", dir, err)
	}
	f, err := os.Open(filepath.Join(root, IgnoreFile))
	switch {
	case err == nil:
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if l := sc.Text(); strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "#") {
				ps = append(ps, gitignore.ParsePattern(l, nil))
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", IgnoreFile, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("reading %s: %w", IgnoreFile, err)
	}
	m := gitignore.NewMatcher(ps)
	return func(rel []string, isDir bool) bool {
		return (len(rel) > 0 && rel[0] == ".git") || m.Match(rel, isDir)
	}, nil
}
