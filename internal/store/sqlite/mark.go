package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// MarkSuffix names the file, beside the database, that holds the commit
// mark: the count of the last acknowledged commit.
const MarkSuffix = ".hwm"

// ErrLostWrites is what a LostWritesError wraps.
var ErrLostWrites = errors.New("acknowledged writes are missing from the database")

// LostWritesError says that the database holds fewer commits than were
// acknowledged: its WAL was damaged or removed, or the file was replaced by
// an older copy or a new one. Open refuses such a database unless
// Options.AcceptLostWrites is set.
type LostWritesError struct {
	Path string
	// Acknowledged is the mark: the last commit acknowledged, and when.
	Acknowledged   uint64
	AcknowledgedAt time.Time
	// Found is the last commit the database holds, and when (zero for a
	// new database).
	Found   uint64
	FoundAt time.Time
}

func (e *LostWritesError) Error() string {
	since := "it holds none"
	if e.Found > 0 {
		since = fmt.Sprintf("it holds commits up to #%d (%s)", e.Found, e.FoundAt.Format(time.RFC3339))
	}
	return fmt.Sprintf("%s: %v: commit #%d was acknowledged at %s, but %s; the last %d acknowledged commits (#%d to #%d) are lost "+
		"(every job, attempt, node, token, grant, audit and ledger write acknowledged in that time). "+
		"Its WAL (%s-wal) was damaged or removed, or the file was replaced by an older copy. "+
		"Restore the database and its -wal file from a copy that has them, or start anyway with --accept-lost-writes "+
		"(if you meant to start afresh, remove %s too); `gpufleet store check` reports the same",
		e.Path, ErrLostWrites, e.Acknowledged, e.AcknowledgedAt.Format(time.RFC3339), since, e.Acknowledged-e.Found, e.Found+1, e.Acknowledged,
		e.Path, e.Path+MarkSuffix)
}

func (e *LostWritesError) Unwrap() error { return ErrLostWrites }

// mark is a commit count and the time of that commit.
type mark struct {
	seq uint64
	at  time.Time
}

// markFile is the commit mark kept outside the database. It is rewritten in
// place (one fixed-width line, well under a disk sector) and synced after
// every commit, before the commit's batches are acknowledged, so it is never
// below what any caller was told is durable. Only the committer writes it.
type markFile struct {
	f *os.File
}

// markLine is the mark's fixed-width format: count and Unix nanoseconds.
const markLine = "gpufleet-commit-mark v1 %020d %020d\n"

// openMark opens (creating, mode 0600) the mark file at path and reads it;
// found is false when it was empty or new.
func openMark(path string) (*markFile, mark, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, mark{}, false, fmt.Errorf("opening commit mark: %w", err)
	}
	m, found, err := readMark(f)
	if err != nil {
		f.Close()
		return nil, mark{}, false, fmt.Errorf("reading commit mark %s: %w", path, err)
	}
	return &markFile{f: f}, m, found, nil
}

// readMark reads a mark; an empty file is no mark.
func readMark(r io.ReaderAt) (mark, bool, error) {
	buf := make([]byte, 128)
	n, err := r.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return mark{}, false, err
	}
	if n == 0 {
		return mark{}, false, nil
	}
	fields := strings.Fields(string(buf[:n]))
	if len(fields) != 4 || fields[0] != "gpufleet-commit-mark" || fields[1] != "v1" {
		return mark{}, false, fmt.Errorf("not a commit mark: %q", buf[:n])
	}
	seq, err1 := strconv.ParseUint(fields[2], 10, 64)
	nanos, err2 := strconv.ParseInt(fields[3], 10, 64)
	if err1 != nil || err2 != nil {
		return mark{}, false, fmt.Errorf("not a commit mark: %q", buf[:n])
	}
	m := mark{seq: seq}
	if nanos != 0 {
		m.at = time.Unix(0, nanos).UTC()
	}
	return m, true, nil
}

// write records m durably.
func (mf *markFile) write(m mark) error {
	var nanos int64
	if !m.at.IsZero() {
		nanos = m.at.UnixNano()
	}
	if _, err := mf.f.WriteAt(fmt.Appendf(nil, markLine, m.seq, nanos), 0); err != nil {
		return fmt.Errorf("writing commit mark: %w", err)
	}
	if err := datasync(mf.f); err != nil {
		return fmt.Errorf("syncing commit mark: %w", err)
	}
	return nil
}

func (mf *markFile) close() error { return mf.f.Close() }

// committed reads the database's own commit count: zero for a database
// without one (new, or from before counts were kept).
func committed(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (mark, error) {
	var (
		m      mark
		at     string
		tables int
	)
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'store_commits'`).Scan(&tables); err != nil {
		return mark{}, fmt.Errorf("reading the commit count: %w", err)
	}
	if tables == 0 {
		return mark{}, nil
	}
	if err := q.QueryRowContext(ctx, `SELECT seq, at FROM store_commits WHERE id = 1`).Scan(&m.seq, &at); err != nil {
		return mark{}, fmt.Errorf("reading the commit count: %w", err)
	}
	if at != "" {
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return mark{}, fmt.Errorf("reading the commit count: time %q: %w", at, err)
		}
		m.at = t
	}
	return m, nil
}

// Report is what Check found.
type Report struct {
	Path string `json:"path"`
	// Integrity is SQLite's integrity_check: "ok", or each problem.
	Integrity     []string `json:"integrity"`
	SchemaVersion int      `json:"schemaVersion"`
	// Commits is the database's count of commits, CommitAt the latest's
	// time.
	Commits  uint64    `json:"commits"`
	CommitAt time.Time `json:"commitAt,omitzero"`
	// Mark is the last acknowledged commit as the mark file records it;
	// MarkFound is false when there is no mark file.
	MarkFound bool      `json:"markFound"`
	Mark      uint64    `json:"mark"`
	MarkAt    time.Time `json:"markAt,omitzero"`
	// Problems says what is wrong, in words; empty means healthy.
	Problems []string `json:"problems"`
}

// Check examines the database at path without writing it: SQLite's
// integrity check, and its commit count against the mark of the last
// acknowledged commit. It is safe while a server uses the database. An
// error means it could not check; what it found wrong is in the report.
func Check(ctx context.Context, path string) (Report, error) {
	r := Report{Path: path, Problems: []string{}}
	if _, err := os.Stat(path); err != nil {
		return r, fmt.Errorf("checking %s: %w", path, err)
	}
	// The mark first: it is written after each commit, so read in this
	// order it is never ahead of a healthy database, even a live one.
	if f, err := os.Open(path + MarkSuffix); err == nil {
		m, found, err := readMark(f)
		f.Close()
		if err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("the commit mark %s is unreadable: %v", path+MarkSuffix, err))
		}
		r.MarkFound, r.Mark, r.MarkAt = found, m.seq, m.at
	} else if !errors.Is(err, os.ErrNotExist) {
		return r, fmt.Errorf("reading commit mark: %w", err)
	}
	db, err := sql.Open("sqlite", readOnlyDSN(path))
	if err != nil {
		return r, fmt.Errorf("opening %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	rows, err := db.QueryContext(ctx, `PRAGMA integrity_check`)
	if err != nil {
		return r, fmt.Errorf("checking %s: %w", path, err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			rows.Close()
			return r, fmt.Errorf("checking %s: %w", path, err)
		}
		r.Integrity = append(r.Integrity, line)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return r, fmt.Errorf("checking %s: %w", path, err)
	}
	if len(r.Integrity) != 1 || r.Integrity[0] != "ok" {
		r.Problems = append(r.Problems, fmt.Sprintf("SQLite's integrity check found %d problems: %s", len(r.Integrity), strings.Join(r.Integrity, "; ")))
	}
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&r.SchemaVersion); err != nil {
		r.SchemaVersion = 0 // an empty database: no schema yet
	}
	c, err := committed(ctx, db)
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
		return r, nil
	}
	r.Commits, r.CommitAt = c.seq, c.at
	if r.MarkFound && r.Mark > r.Commits {
		r.Problems = append(r.Problems, (&LostWritesError{Path: path, Acknowledged: r.Mark, AcknowledgedAt: r.MarkAt, Found: c.seq, FoundAt: c.at}).Error())
	}
	if !r.MarkFound && r.Commits > 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("the commit mark %s is missing: lost writes cannot be detected until the server starts and writes it again", path+MarkSuffix))
	}
	return r, nil
}
