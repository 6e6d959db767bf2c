package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/groupcommit"
)

// DefaultMaxBatch is the most batches one transaction takes when
// Options.MaxBatch is zero.
const DefaultMaxBatch = groupcommit.DefaultMaxBatch

// Options tune a Store. The zero value means defaults.
type Options struct {
	// MaxBatch is the most batches grouped into one transaction; 0 or less
	// means DefaultMaxBatch.
	MaxBatch int
	// Logger receives migration and commit-failure records; nil discards them.
	Logger *slog.Logger
	// Clock decides which idempotency records have expired at Load; nil means
	// the wall clock. Commit latency is always measured on the wall clock.
	Clock clock.Clock
	// CommitObserver, if set, is called after every successful commit with
	// its latency (begin to fsync) and the number of batches it held, so a
	// metrics layer can record them. It runs on the committer goroutine
	// before the group's channels are completed, so it must return quickly;
	// every batch it counts is durable by the time it is called.
	CommitObserver func(d time.Duration, batches int)
	// AcceptLostWrites opens a database that holds fewer commits than
	// were acknowledged (see LostWritesError) instead of refusing it; the
	// loss is logged at error level and the mark moves back to what the
	// database holds.
	AcceptLostWrites bool
}

// Stats are cumulative counters of a Store's committer.
type Stats = groupcommit.Stats

// Store is the SQLite store.Store. It is safe for concurrent use.
type Store struct {
	db    *sql.DB
	stmts *statements
	log   *slog.Logger
	clock clock.Clock
	opts  Options

	// gc is the committer, started once Open succeeded.
	gc        *groupcommit.Committer[[]row]
	closeOnce sync.Once
	closeErr  error

	// mark is the commit mark outside the database and seq the count of
	// the last commit; only the committer touches them once started.
	mark *markFile
	seq  uint64
}

var _ store.Store = (*Store)(nil)

// Open opens the database at path, creating it with mode 0600 if it does
// not exist (its directory must), brings its schema up to date, and starts
// the committer. A database migrated by a newer gpufleet is refused with
// ErrSchemaTooNew. Only one Store, in one process, may have a file open.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("resolving database path: %w", err)
	}
	// SQLite would create the file with mode 0644; it holds token hashes,
	// so create it first and let SQLite open it as it is. The WAL and
	// shared-memory files inherit its mode.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating database file: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("creating database file: %w", err)
	}
	db, err := sql.Open("sqlite", dsn(abs))
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", abs, err)
	}
	// One connection: the committer is the only writer and Load runs once,
	// at start, so more connections would only contend for SQLite's lock.
	// It also keeps each prepared statement prepared once.
	db.SetMaxOpenConns(1)
	s, err := start(ctx, db, abs, opts)
	if err != nil {
		if s != nil && s.mark != nil {
			s.mark.close()
		}
		db.Close()
		var lost *LostWritesError
		if errors.As(err, &lost) {
			return nil, err
		}
		return nil, fmt.Errorf("opening %s: %w", abs, err)
	}
	s.gc = groupcommit.Start(s.commit, func(rows []row) int { return len(rows) },
		groupcommit.Options{MaxBatch: opts.MaxBatch, Logger: s.log, Observer: opts.CommitObserver})
	return s, nil
}

// checkMark compares the database's commit count with the mark of the last
// acknowledged commit kept beside it, refusing a database that lost
// acknowledged writes (unless accept), and leaves the mark open for the
// committer, equal to the database's count.
func (s *Store) checkMark(ctx context.Context, path string, accept bool) error {
	mf, ack, found, err := openMark(path + MarkSuffix)
	if err != nil {
		return err
	}
	s.mark = mf
	have, err := committed(ctx, s.db)
	if err != nil {
		return err
	}
	switch {
	case found && ack.seq > have.seq:
		lost := &LostWritesError{Path: path, Acknowledged: ack.seq, AcknowledgedAt: ack.at, Found: have.seq, FoundAt: have.at}
		if !accept {
			return lost
		}
		s.log.Error("STARTING WITH LOST WRITES (accepted): the database lacks acknowledged commits", "lost_commits", ack.seq-have.seq,
			"acknowledged", ack.seq, "acknowledged_at", ack.at, "found", have.seq, "found_at", have.at, "err", lost.Error())
	case !found && have.seq > 0:
		s.log.Warn("the commit mark was missing; writing it again: lost writes since it went cannot be detected", "path", path+MarkSuffix, "commits", have.seq)
	}
	s.seq = have.seq
	if !found || ack != have {
		if err := mf.write(have); err != nil {
			return fmt.Errorf("opening %s: %w", path, err)
		}
	}
	return nil
}

// dsn names the database file as an SQLite URI with the settings every
// connection needs; they are per connection, so they go in the DSN rather
// than in one-off statements.
//   - WAL: a commit appends to one file and needs one fsync.
//   - synchronous FULL: in WAL mode NORMAL may lose the latest commits on
//     power loss, and an acknowledged write must survive it.
//   - busy_timeout: wait rather than fail when a sqlite3 shell holds a lock.
//   - foreign_keys: SQLite leaves them off unless asked.
//   - _txlock=immediate: take the write lock at BEGIN, so a transaction
//     never fails halfway for want of it.
func dsn(path string) string {
	u := url.URL{Scheme: "file", Opaque: (&url.URL{Path: path}).EscapedPath()}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	u.RawQuery = q.Encode()
	return u.String()
}

// readOnlyDSN opens path for reading only (Check): it never writes the
// database, its WAL or the mark.
func readOnlyDSN(path string) string {
	u := url.URL{Scheme: "file", Opaque: (&url.URL{Path: path}).EscapedPath()}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "busy_timeout(5000)")
	u.RawQuery = q.Encode()
	return u.String()
}

// start checks the database against its commit mark (before anything
// writes it: a refused database is left as it was found), migrates it and
// prepares the committer's statements. On error the returned Store, if
// any, holds only what must be closed.
func start(ctx context.Context, db *sql.DB, path string, opts Options) (*Store, error) {
	s := &Store{db: db, log: opts.Logger, clock: opts.Clock, opts: opts}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = clock.Real{}
	}
	if err := s.checkMark(ctx, path, opts.AcceptLostWrites); err != nil {
		return s, err
	}
	migs, err := embeddedMigrations()
	if err != nil {
		return s, err
	}
	if err := migrate(ctx, db, migs, s.log); err != nil {
		return s, err
	}
	if s.stmts, err = prepare(ctx, db); err != nil {
		return s, err
	}
	return s, nil
}

// Submit encodes b, queues it for the committer and returns; see
// store.Store. It never waits for a commit. The channel is buffered, so a
// caller that stops waiting leaks nothing. It yields store.ErrClosed after
// Close, and an encoding error (such as a NaN price) at once, without
// queueing b.
func (s *Store) Submit(b *store.Batch) <-chan error { return s.Prepare(b)() }

// Prepare encodes b and returns the function that queues it; see
// store.Preparer.
func (s *Store) Prepare(b *store.Batch) func() <-chan error {
	rows, err := encodeBatch(b)
	if err != nil {
		return func() <-chan error { return groupcommit.Failed(err) }
	}
	return func() <-chan error { return s.gc.Submit(rows) }
}

// Close stops accepting batches, waits until every batch already submitted
// is committed (or has failed), and closes the database. It is safe to call
// more than once and from several goroutines; every call returns the first
// call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.gc != nil {
			s.gc.Close()
		}
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("closing database: %w", err)
		}
		if s.mark != nil {
			if err := s.mark.close(); err != nil && s.closeErr == nil {
				s.closeErr = fmt.Errorf("closing commit mark: %w", err)
			}
		}
	})
	return s.closeErr
}

// Stats returns the committer's counters so far.
func (s *Store) Stats() Stats { return s.gc.Stats() }

// commit writes group in one transaction with the next commit count, then
// moves the mark to it before any batch is acknowledged: the mark is never
// below an acknowledged commit. A mark that fails to move only weakens
// detection (the mark lags), so the durable batches are still acknowledged.
func (s *Store) commit(group [][]row) ([]error, error) {
	at := time.Now().UTC()
	errs, err := s.write(group, mark{seq: s.seq + 1, at: at})
	if err != nil {
		return nil, err
	}
	s.seq++
	if merr := s.mark.write(mark{seq: s.seq, at: at}); merr != nil {
		s.log.Error("commit mark not updated: lost writes after this commit may go undetected", "err", merr)
	}
	return errs, nil
}
