package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/encode"
	"github.com/gpufleet/gpufleet/internal/store/groupcommit"
)

//go:embed migrations/*.sql
var embedded embed.FS

// Options tune a Store. The zero value means defaults.
type Options struct {
	// MaxBatch is the most batches grouped into one transaction; 0 or less
	// means groupcommit.DefaultMaxBatch.
	MaxBatch int
	// Logger receives migration, connection and commit-failure records;
	// nil discards them.
	Logger *slog.Logger
	// Clock decides which idempotency records have expired at Load; nil
	// means the wall clock. Leases use the database's clock.
	Clock clock.Clock
	// CommitObserver, if set, is called after every successful commit with
	// its latency and the number of batches it held (see
	// groupcommit.Options.Observer).
	CommitObserver func(d time.Duration, batches int)
	// Shared lets several Stores (server replicas) open the database at
	// once. They must then fence their writes with leases; without Shared
	// a second Store is refused with ErrInUse.
	Shared bool
	// MaxConns bounds the connections for Load, Audit and leases (the
	// committer has its own); 0 means 4.
	MaxConns int32
	// CommitTimeout bounds one transaction; 0 means one minute.
	CommitTimeout time.Duration
	// CommitConns is how many connections the committer writes on, one
	// group in flight on each; 0 means 2 for a shared store and 1
	// otherwise (a store that is not shared holds its writer lock on one
	// session, so it writes on that one alone).
	CommitConns int
	// LockWait is how long Open waits for the writer lock before failing
	// with ErrInUse (a crashed predecessor's session ends a moment after
	// its process); 0 means 5s.
	LockWait time.Duration
}

// Stats are cumulative counters of a Store's committer.
type Stats = groupcommit.Stats

// ErrInUse says another Store writes the database (see Options.Shared).
var ErrInUse = errors.New("the database is in use by another gpufleet server")

// writerLock is the advisory lock key a non-shared Store's committer holds:
// "gpufleet" in ASCII.
const writerLock = 0x67707566_6c656574

// migrateLock serialises migrations among replicas starting together.
const migrateLock = writerLock + 1

// Store is the PostgreSQL store.Store and store.Leaser. It is safe for
// concurrent use.
type Store struct {
	cfg   *pgx.ConnConfig // the committer's connection settings
	pool  *pgxpool.Pool   // Load, Audit, leases
	log   *slog.Logger
	clock clock.Clock
	opts  Options
	desc  string // the DSN without its password

	// conns are the committer's own connections, conns[0] the primary
	// (migrations, the writer lock); free holds those no group is in
	// flight on (pipeline.go).
	conns []*cconn
	free  chan *cconn
	// recentKeys are the rows of the groups sent last that may still be
	// in flight (one fewer than the connections); only send uses it.
	recentKeys []map[string]struct{}
	// tail is the commit number of the group sent last.
	seqMu sync.Mutex
	tail  int64
	// pipelined counts groups committed in their pipeline, rewrites those
	// written again alone.
	pipelined, rewrites atomic.Uint64

	gc *groupcommit.Committer[batch]
	// prune is the committer's record of when the change feed may be
	// pruned up to which seq (feed.go).
	pruneMu sync.Mutex
	prune   pruner
	// listener is the connection Wait listens on (feed.go).
	listenMu sync.Mutex
	listener *pgx.Conn

	closeOnce sync.Once
	closeErr  error
}

var (
	_ store.Store  = (*Store)(nil)
	_ store.Leaser = (*Store)(nil)
)

// batch is a submitted batch, encoded.
type batch struct {
	rows  []encode.Row
	fence *store.Fence
	// change is the batch's change record (encode.Change), made only by
	// a shared store, which keeps the change feed.
	change []byte
}

// IsDSN reports whether s names a PostgreSQL database (postgres:// or
// postgresql://).
func IsDSN(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// Describe returns dsn fit for a log: its password, and any password
// parameter, replaced by "xxxxx". A DSN that does not parse is described
// only by its scheme.
func Describe(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		if scheme, _, ok := strings.Cut(dsn, "://"); ok && !strings.ContainsAny(scheme, "@:/") {
			return scheme + "://(unparsable)"
		}
		return "(unparsable DSN)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	for k := range q {
		if strings.EqualFold(k, "password") {
			q.Set(k, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Open connects to the database dsn names, brings its schema up to date,
// and starts the committer. A database migrated by a newer gpufleet is
// refused with schema.ErrTooNew; one another Store writes, with ErrInUse
// (unless Options.Shared). Errors never carry the DSN's password.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	desc := Describe(dsn)
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgconn redacts the password in its parse errors.
		return nil, fmt.Errorf("parsing the PostgreSQL DSN %s: %w", desc, err)
	}
	if pcfg.ConnConfig.RuntimeParams["application_name"] == "" {
		pcfg.ConnConfig.RuntimeParams["application_name"] = "gpufleet"
	}
	pcfg.MaxConns = opts.MaxConns
	if pcfg.MaxConns <= 0 {
		pcfg.MaxConns = 4
	}
	s := &Store{cfg: pcfg.ConnConfig.Copy(), log: opts.Logger, clock: opts.Clock, opts: opts, desc: desc}
	// The server drops a session whose client vanished (a machine that
	// died, a partition) after about 25s instead of the kernel's two
	// hours, releasing its writer lock.
	// A committer frozen inside a transaction (SIGSTOP, a paused VM) with
	// its connection still up would hold its commit ticket, and stall a
	// new leader's commits, until it resumed: the server ends such a
	// transaction after 10 s idle (a commit's statements follow its ticket
	// at once, so only a stopped client waits that long).
	for k, v := range map[string]string{"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3",
		"idle_in_transaction_session_timeout": "10s"} {
		if _, set := s.cfg.RuntimeParams[k]; !set {
			s.cfg.RuntimeParams[k] = v
		}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = clock.Real{}
	}
	if s.opts.CommitTimeout <= 0 {
		s.opts.CommitTimeout = time.Minute
	}
	if s.opts.LockWait <= 0 {
		s.opts.LockWait = 5 * time.Second
	}
	depth := s.opts.CommitConns
	if depth <= 0 || !s.opts.Shared {
		depth = 1
		if s.opts.Shared && s.opts.CommitConns <= 0 {
			depth = 2
		}
	}
	// The primary connects now; the others when a group is first sent on
	// them (send's ready), so Open costs one connection as before.
	conn, err := s.dial(ctx, true)
	if err != nil {
		return nil, err
	}
	s.conns = append(s.conns, &cconn{conn: conn, primary: true})
	for range depth - 1 {
		s.conns = append(s.conns, &cconn{})
	}
	closeAll := func() { conn.Close(context.Background()) }
	if err := s.migrate(ctx); err != nil {
		closeAll()
		return nil, fmt.Errorf("migrating %s: %w", desc, err)
	}
	if err := s.conns[0].conn.QueryRow(ctx, readCommits).Scan(&s.tail); err != nil {
		closeAll()
		return nil, fmt.Errorf("reading %s's commit count: %w", desc, err)
	}
	if s.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		closeAll()
		return nil, fmt.Errorf("connecting to %s: %w", desc, err)
	}
	s.free = make(chan *cconn, depth)
	for _, cc := range s.conns {
		s.free <- cc
	}
	s.gc = groupcommit.StartPipelined(s.send, func(b batch) int { return len(b.rows) },
		groupcommit.Options{MaxBatch: opts.MaxBatch, Logger: s.log, Observer: opts.CommitObserver, Depth: depth})
	return s, nil
}

// primary is the committer's first connection (migrations, the writer
// lock).
func (s *Store) primary() *pgx.Conn { return s.conns[0].conn }

// dial opens one of the committer's connections, takes the writer lock on
// the primary unless shared, and makes sure its commits are durable.
func (s *Store) dial(ctx context.Context, primary bool) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", s.desc, err)
	}
	fail := func(err error) (*pgx.Conn, error) {
		conn.Close(context.Background())
		return nil, err
	}
	if primary && !s.opts.Shared {
		for deadline := time.Now().Add(s.opts.LockWait); ; {
			var got bool
			if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(writerLock)).Scan(&got); err != nil {
				return fail(fmt.Errorf("locking %s for this server: %w", s.desc, err))
			}
			if got {
				break
			}
			if time.Now().After(deadline) {
				return fail(s.inUse(ctx, conn))
			}
			select {
			case <-ctx.Done():
				return fail(ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	var syncCommit, fsync string
	if err := conn.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('fsync')`).Scan(&syncCommit, &fsync); err != nil {
		return fail(fmt.Errorf("reading %s's settings: %w", s.desc, err))
	}
	if syncCommit == "off" {
		if _, err := conn.Exec(ctx, `SET synchronous_commit = on`); err != nil {
			return fail(fmt.Errorf("setting synchronous_commit on: %w", err))
		}
		s.log.Warn("synchronous_commit was off for gpufleet's session; set on, so an acknowledged write survives a crash", "store", s.desc)
	}
	if fsync == "off" {
		s.log.Warn("PostgreSQL runs with fsync=off: acknowledged writes may be lost if its machine crashes", "store", s.desc)
	}
	return conn, nil
}

// inUse describes the session holding the writer lock.
func (s *Store) inUse(ctx context.Context, conn *pgx.Conn) error {
	var (
		pid  int32
		app  string
		addr string
	)
	err := conn.QueryRow(ctx, `SELECT a.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local')
		FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND (l.classid::bigint << 32) | l.objid::bigint = $1 LIMIT 1`, int64(writerLock)).Scan(&pid, &app, &addr)
	if err != nil {
		return fmt.Errorf("%s: %w: stop that server first (or run replicas with leases)", s.desc, ErrInUse)
	}
	return fmt.Errorf("%s: %w (%s from %s, backend pid %d): stop that server first (or run replicas with leases)", s.desc, ErrInUse, app, addr, pid)
}

// Submit encodes b, queues it for the committer and returns; see
// store.Store. It yields store.ErrClosed after Close, and an encoding error
// at once, without queueing b.
func (s *Store) Submit(b *store.Batch) <-chan error { return s.Prepare(b)() }

// Prepare encodes b and returns the function that queues it; see
// store.Preparer.
func (s *Store) Prepare(b *store.Batch) func() <-chan error {
	rows, err := encode.Batch(b)
	if err != nil {
		return func() <-chan error { return groupcommit.Failed(err) }
	}
	var f *store.Fence
	if b != nil && b.Fence != nil {
		c := *b.Fence
		f = &c
	}
	var change []byte
	if s.opts.Shared && len(rows) > 0 {
		if change, err = encode.Change(rows); err != nil {
			return func() <-chan error { return groupcommit.Failed(err) }
		}
	}
	return func() <-chan error { return s.gc.Submit(batch{rows: rows, fence: f, change: change}) }
}

// Close stops accepting batches, waits until every batch already submitted
// is committed (or has failed), and closes the connections, releasing the
// writer lock. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.gc.Close()
		for _, cc := range s.conns {
			if cc.conn == nil {
				continue // never used
			}
			// Unlocked here rather than by the session's end, which the
			// server notices only after the connection closes: a Store
			// opened right after this one returns must find it free.
			if cc.primary && !s.opts.Shared && !cc.conn.IsClosed() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if _, err := cc.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(writerLock)); err != nil {
					s.closeErr = fmt.Errorf("unlocking %s: %w", s.desc, err)
				}
				cancel()
			}
			if err := cc.conn.Close(context.Background()); err != nil && s.closeErr == nil {
				s.closeErr = fmt.Errorf("closing connection to %s: %w", s.desc, err)
			}
		}
		s.listenMu.Lock()
		if s.listener != nil {
			s.listener.Close(context.Background())
			s.listener = nil
		}
		s.listenMu.Unlock()
		s.pool.Close()
	})
	return s.closeErr
}

// Stats returns the committer's counters so far.
func (s *Store) Stats() Stats { return s.gc.Stats() }
