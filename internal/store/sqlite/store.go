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
)

// DefaultMaxBatch is the most batches one transaction takes when
// Options.MaxBatch is zero. It bounds how long the first caller of a group
// waits behind the others and how much one transaction holds in memory.
const DefaultMaxBatch = 4096

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
type Stats struct {
	// Commits counts transactions committed.
	Commits uint64
	// Failures counts transactions that failed as a whole, failing every
	// batch in them.
	Failures uint64
	// Batches and Rows count the batches made durable and the rows they
	// submitted (rows the version guard skipped included).
	Batches uint64
	Rows    uint64
	// LastCommit is the latency of the latest successful commit.
	LastCommit time.Duration
}

// Store is the SQLite store.Store. It is safe for concurrent use.
type Store struct {
	db       *sql.DB
	stmts    *statements
	log      *slog.Logger
	clock    clock.Clock
	observe  func(time.Duration, int)
	maxBatch int

	mu     sync.Mutex
	wake   *sync.Cond // signalled when queue grows or closed is set
	queue  []pending
	closed bool
	stats  Stats

	stopped   chan struct{} // closed when the committer returns
	closeOnce sync.Once
	closeErr  error

	// mark is the commit mark outside the database and seq the count of
	// the last commit; only the committer touches them once started.
	mark *markFile
	seq  uint64
	// running says the committer was started (Open succeeded).
	running bool
}

var _ store.Store = (*Store)(nil)

// pending is a submitted batch, encoded, and the channel its caller waits
// on.
type pending struct {
	rows []row
	done chan error
}

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
	s.running = true
	go s.run()
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
	s := &Store{
		db:       db,
		log:      opts.Logger,
		clock:    opts.Clock,
		observe:  opts.CommitObserver,
		maxBatch: opts.MaxBatch,
		stopped:  make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = clock.Real{}
	}
	if s.maxBatch <= 0 {
		s.maxBatch = DefaultMaxBatch
	}
	s.wake = sync.NewCond(&s.mu)
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
func (s *Store) Submit(b *store.Batch) <-chan error {
	done := make(chan error, 1)
	rows, err := encode(b)
	s.mu.Lock()
	switch {
	case s.closed:
		err = store.ErrClosed
	case err == nil:
		s.queue = append(s.queue, pending{rows: rows, done: done})
	}
	s.mu.Unlock()
	if err != nil {
		done <- err
		close(done)
		return done
	}
	s.wake.Signal()
	return done
}

// Close stops accepting batches, waits until every batch already submitted
// is committed (or has failed), and closes the database. It is safe to call
// more than once and from several goroutines; every call returns the first
// call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.wake.Signal()
		if s.running {
			<-s.stopped
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
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// run is the committer, the only goroutine that writes. It takes whatever
// is queued and makes it durable in one transaction, so concurrent callers
// share one fsync instead of paying one each; under load, batches arriving
// during a commit form the next group.
func (s *Store) run() {
	defer close(s.stopped)
	for {
		group := s.next()
		if len(group) == 0 {
			return
		}
		s.commit(group)
	}
}

// next waits for queued batches and takes up to maxBatch of them, oldest
// first. It returns nothing once the store is closed and drained.
func (s *Store) next() []pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) == 0 && !s.closed {
		s.wake.Wait()
	}
	group := s.queue
	if len(group) > s.maxBatch {
		group, s.queue = group[:s.maxBatch:s.maxBatch], group[s.maxBatch:]
	} else {
		s.queue = nil
	}
	return group
}

// commit writes group, then reports to the metrics and to every waiter, in
// that order, so that whoever sees its batch acknowledged also sees it
// counted.
func (s *Store) commit(group []pending) {
	begin := time.Now()
	errs, err := s.write(group, mark{seq: s.seq + 1, at: begin.UTC()})
	if err == nil {
		s.seq++
		// Before any batch is acknowledged: the mark is never below an
		// acknowledged commit. A failure only weakens detection (the
		// mark lags), so the durable batches are still acknowledged.
		if merr := s.mark.write(mark{seq: s.seq, at: begin.UTC()}); merr != nil {
			s.log.Error("commit mark not updated: lost writes after this commit may go undetected", "err", merr)
		}
	}
	took := time.Since(begin)

	s.mu.Lock()
	if err != nil {
		s.stats.Failures++
	} else {
		s.stats.Commits++
		s.stats.LastCommit = took
		for i, p := range group {
			if errs[i] == nil {
				s.stats.Batches++
				s.stats.Rows += uint64(len(p.rows))
			}
		}
	}
	s.mu.Unlock()

	if err != nil {
		s.log.Error("commit failed", "batches", len(group), "err", err)
	} else if s.observe != nil {
		s.observe(took, len(group))
	}
	for i, p := range group {
		if err != nil {
			p.done <- err
		} else {
			p.done <- errs[i]
		}
		close(p.done)
	}
}
