// Package schema reads a store's numbered SQL migrations (NNNN_name.sql)
// and owns the rule every backend shares: numbers run 1, 2, 3… without gaps
// or repeats, and a database's schema version is the number of the last
// script applied to it. Applying them is each backend's own job (its SQL
// dialect, its locking).
package schema

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

// ErrTooNew says a database was migrated by a newer gpufleet: this binary
// cannot know what the newer schema means, so it refuses to touch it rather
// than corrupt it.
var ErrTooNew = errors.New("database schema is newer than this gpufleet")

// Migration is one numbered SQL script.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Read reads NNNN_name.sql files from the root of fsys, ordered by number.
// The numbers must run 1, 2, 3… without gaps or repeats: a gap would make
// a database's version ambiguous.
func Read(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("listing migrations: %w", err)
	}
	migs := make([]Migration, 0, len(names))
	for _, name := range names {
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_description.sql", name)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("reading migration %s: %w", name, err)
		}
		migs = append(migs, Migration{Version: v, Name: name, SQL: string(b)})
	}
	slices.SortFunc(migs, func(a, b Migration) int { return cmp.Compare(a.Version, b.Version) })
	for i, m := range migs {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %s: want number %d (numbers run from 1 without gaps or repeats)", m.Name, i+1)
		}
	}
	return migs, nil
}

// Pending returns the migrations a database at version current still needs,
// or ErrTooNew when it is past the last of migs.
func Pending(migs []Migration, current int) ([]Migration, error) {
	if current > len(migs) {
		return nil, fmt.Errorf("%w: the database is at schema version %d and this binary knows versions up to %d; upgrade gpufleet to open it",
			ErrTooNew, current, len(migs))
	}
	return migs[current:], nil
}
