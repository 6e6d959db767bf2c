package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpufleet/gpufleet/internal/store/encode"
)

// The committer's pipeline (groupcommit.StartPipelined): a shared store
// keeps up to two groups in flight, each on its own connection, so the
// next group's statements run in one backend while the previous group's
// commit waits for its WAL flush in another, and the two backends share
// the work of a busy machine. Every group is numbered, in the order sent,
// by the commit count it will leave in store_commits; its transaction
// takes its number's ticket first and counts itself last, after the
// transaction of the number before has ended and only if that one
// committed (0004_ordered_commits.sql). So commits land in the order they
// were sent, a fence is checked in each, and a group sent behind one that
// failed is refused as a whole (GF002) and written again by its finish,
// numbered after the last commit that landed: a failed commit fails only
// its own group's callers.

// cconn is one of the committer's connections; conn is replaced when it
// was lost.
type cconn struct {
	conn *pgx.Conn
	// primary holds the writer lock of a store that is not shared.
	primary bool
}

// flight is a group sent and not yet finished.
type flight struct {
	s      *Store
	cc     *cconn
	group  []batch
	seq    int64
	ctx    context.Context
	cancel context.CancelFunc
	w      *wire
	err    error
}

// send starts writing group on a free connection; see groupcommit.SendFunc.
func (s *Store) send(group []batch) func() ([]error, error) {
	cc := <-s.free
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CommitTimeout)
	f := &flight{s: s, cc: cc, group: group, ctx: ctx, cancel: cancel}
	if f.err = s.ready(ctx, cc); f.err != nil {
		return f.finish
	}
	// Rows in common with a group that may still be in flight: this
	// one waits for the commit before it first, so neither holds a row
	// the other waits for while it waits for the other (a deadlock that
	// PostgreSQL would break only after deadlock_timeout).
	keys := rowKeys(group)
	early := false
	for _, recent := range s.recentKeys {
		for k := range keys {
			if _, ok := recent[k]; ok {
				early = true
				break
			}
		}
	}
	if len(s.conns) > 1 {
		s.recentKeys = append(s.recentKeys, keys)
		if len(s.recentKeys) >= len(s.conns) {
			s.recentKeys = s.recentKeys[1:]
		}
	}
	s.seqMu.Lock()
	s.tail++
	f.seq = s.tail
	s.seqMu.Unlock()
	f.w, f.err = s.sendFast(ctx, cc.conn, group, f.seq, early)
	return f.finish
}

// finish reads the outcome of a group sent; see groupcommit.SendFunc. A
// group refused in the pipeline (a failed row, a stale fence, or a commit
// before it that did not land) is written again here, alone: every group
// before it has finished.
func (f *flight) finish() ([]error, error) {
	defer func() {
		f.cancel()
		f.s.free <- f.cc
	}()
	err := f.err
	if err == nil && f.w != nil {
		err = f.s.readFast(f.w)
	}
	if err == nil {
		f.s.pipelined.Add(1)
		return make([]error, len(f.group)), nil
	}
	if !errors.Is(err, errIsolate) && !errors.Is(err, errOutOfOrder) {
		// The connection failed: the outcome is unknown to the
		// group's callers. A group sent after it finds out which in
		// its own commit.
		return nil, err
	}
	if rerr := rollback(f.ctx, f.cc.conn); rerr != nil {
		return nil, fmt.Errorf("rolling back (%w): %w", err, rerr)
	}
	return f.s.rewrite(f.ctx, f.cc.conn, f.group, f.seq)
}

// PipelineStats counts the groups committed in their pipeline and those
// written again alone after their pipeline was refused.
func (s *Store) PipelineStats() (pipelined, rewritten uint64) {
	return s.pipelined.Load(), s.rewrites.Load()
}

// rewriteTries bounds how often rewrite numbers a group again because
// another writer committed first. Fenced writers never need more than
// one (a takeover waits for the old leader's commits in flight, and
// fences out the rest); docs/postgres.md says when more can happen.
const rewriteTries = 5

// rewrite writes group alone, numbered after the last commit, in one
// pipeline or, when a row or a fence fails, batch by batch; sent is the
// number it was sent with.
func (s *Store) rewrite(ctx context.Context, conn *pgx.Conn, group []batch, sent int64) ([]error, error) {
	s.rewrites.Add(1)
	for try := 1; ; try++ {
		var last int64
		if err := conn.QueryRow(ctx, readCommits).Scan(&last); err != nil {
			return nil, fmt.Errorf("reading the commit count: %w", err)
		}
		seq := last + 1
		errs, err := make([]error, len(group)), s.writeFast(ctx, conn, group, seq)
		if errors.Is(err, errIsolate) {
			errs, err = s.writeIsolated(ctx, conn, group, seq)
		}
		if errors.Is(err, errOutOfOrder) && try < rewriteTries {
			continue
		}
		if err != nil {
			return nil, err
		}
		// Groups sent later were numbered after sent; the last of them
		// (or this one) numbers the next from here.
		s.seqMu.Lock()
		if s.tail == sent {
			s.tail = seq
		}
		s.seqMu.Unlock()
		return errs, nil
	}
}

// ready connects cc the first time it is used, and again when its
// connection was lost.
func (s *Store) ready(ctx context.Context, cc *cconn) error {
	if cc.conn != nil && !cc.conn.IsClosed() {
		return nil
	}
	conn, err := s.dial(ctx, cc.primary)
	if err != nil {
		return err
	}
	if cc.conn != nil {
		s.log.Warn("reconnected the committer to PostgreSQL", "store", s.desc)
	}
	cc.conn = conn
	return nil
}

// committed notes a commit's change seq for pruning (0: none).
func (s *Store) committed(seq int64) {
	s.pruneMu.Lock()
	s.prune.committed(uint64(seq), time.Now())
	s.pruneMu.Unlock()
}

// stmtTable is the table each statement writes, so that an upsert and a
// deletion of one row count as the same row.
var stmtTable = func() (t [encode.NumStmts]string) {
	re := regexp.MustCompile(`^(?:INSERT INTO|DELETE FROM) (\w+)`)
	for st, sql := range stmtSQL {
		t[st] = re.FindStringSubmatch(sql)[1]
	}
	return t
}()

// rowKeys names the rows group writes, by table and the row's identity
// (encode.Row.ID), coarser than the key where the ID is (a ledger entry,
// a budget firing): a false match only makes the next group wait for this
// one before its rows.
func rowKeys(group []batch) map[string]struct{} {
	keys := map[string]struct{}{}
	for _, b := range group {
		for _, r := range b.rows {
			keys[stmtTable[r.Stmt]+"\x00"+r.ID] = struct{}{}
		}
	}
	return keys
}
