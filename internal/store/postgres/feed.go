package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/encode"
)

// The change feed (store.Feed): a shared store records each commit's
// batches in the changes table, in the commit's own transaction, and
// notifies changesChannel when it commits; followers read the rows after
// the last they applied. Rows older than feedRetention are pruned, a few
// commits at a time, by the committer.

var _ store.Feed = (*Store)(nil)

const (
	changesChannel = "gpufleet_changes"
	// feedRetention is how long changes are kept: a follower further
	// behind than that takes a new snapshot.
	feedRetention = 5 * time.Minute
	// pruneEvery is how many commits apart the committer notes a prune
	// point (and prunes).
	pruneEvery = 256
	// insertChange records the change as the commit's seq (markCommit
	// ran before it in the same transaction); notifyChange is delivered to
	// listeners when the transaction commits.
	insertChange = `INSERT INTO changes (seq, data) SELECT seq, $1 FROM store_commits WHERE id = 1 RETURNING seq`
	notifyChange = `SELECT pg_notify('` + changesChannel + `', seq::text) FROM store_commits WHERE id = 1`
	// insertChangeAt and notifyChangeAt do the same for a commit whose
	// number is known before markCommit runs (a pipelined group's: its
	// markCommit fails unless the count becomes exactly that number), so
	// they run before it, outside the part of the transaction that waits
	// for the commit before.
	insertChangeAt = `INSERT INTO changes (seq, data) VALUES ($1, $2) RETURNING seq`
	notifyChangeAt = `SELECT pg_notify('` + changesChannel + `', $1::text)`
	pruneChanges   = `DELETE FROM changes WHERE seq <= $1`
)

// queueChange queues the statements that record group's change (the
// batches without an error in errs, nil: all) as commit number seq, or,
// with seq 0, as the number markCommit (queued before them) gave, and
// returns the index in pb of the statement that yields the change's seq,
// or -1 when the store is not shared (it keeps no feed). Every commit of a
// shared store records a change, an empty one too, so the feed's seqs
// have no gap.
func (s *Store) queueChange(pb *pgx.Batch, group []batch, errs []error, seq int64) int {
	if !s.opts.Shared {
		return -1
	}
	var rec bytes.Buffer
	rec.WriteByte('[')
	n := 0
	for i, b := range group {
		if b.change == nil || errs != nil && errs[i] != nil {
			continue
		}
		if n > 0 {
			rec.WriteByte(',')
		}
		rec.Write(b.change)
		n++
	}
	// A commit that writes no row (fences alone, or every batch failed)
	// still counts a commit: its record is empty, so the feed has no gap.
	rec.WriteByte(']')
	at := pb.Len()
	if seq > 0 {
		pb.Queue(insertChangeAt, seq, rec.Bytes())
		pb.Queue(notifyChangeAt, strconv.FormatInt(seq, 10))
	} else {
		pb.Queue(insertChange, rec.Bytes())
		pb.Queue(notifyChange)
	}
	if seq <= 0 {
		// Queued after markCommit, whose wait orders this commit after
		// the one before: the prune may go with the record.
		s.queuePrune(pb)
	}
	return at
}

// queuePrune queues the deletion of changes past their retention, when one
// is due. It must follow markCommit: queued before it, the prune of a
// pipelined group could lock rows the next group's prune already holds
// while that group waits in markCommit for this one — a deadlock.
func (s *Store) queuePrune(pb *pgx.Batch) {
	if !s.opts.Shared {
		return
	}
	s.pruneMu.Lock()
	upTo := s.prune.due(time.Now())
	s.pruneMu.Unlock()
	if upTo > 0 {
		pb.Queue(pruneChanges, int64(upTo))
	}
}

// pruner remembers, every pruneEvery commits, the seq committed then, so
// changes older than feedRetention can be deleted by seq (the primary
// key) without an index on time. Only the committer uses it.
type pruner struct {
	commits uint64
	marks   []pruneMark
	pruned  uint64
}

type pruneMark struct {
	at  time.Time
	seq uint64
}

// committed notes that the change seq committed at now (0: none).
func (p *pruner) committed(seq uint64, now time.Time) {
	if seq == 0 {
		return
	}
	if p.commits++; p.commits%pruneEvery == 1 {
		p.marks = append(p.marks, pruneMark{now, seq})
	}
}

// due returns the seq up to which changes may be deleted now, 0 when
// there is nothing new to prune.
func (p *pruner) due(now time.Time) uint64 {
	var upTo uint64
	i := 0
	for ; i < len(p.marks) && now.Sub(p.marks[i].at) > feedRetention; i++ {
		upTo = p.marks[i].seq
	}
	p.marks = p.marks[i:]
	if upTo <= p.pruned {
		return 0
	}
	p.pruned = upTo
	return upTo
}

// notificationsSQL reads the undelivered notifications (Load), or all of
// them (Snapshot: a mirror keeps the delivered ones as tombstones, as the
// table does, so a later write of one is ignored as the store ignores it).
var notificationsSQL = map[bool]string{
	false: `SELECT id, data FROM notifications WHERE delivered = 0 ORDER BY id COLLATE "C"`,
	true:  `SELECT id, data FROM notifications ORDER BY id COLLATE "C"`,
}

// Snapshot loads the store as Load does, with the seq of the last change
// that load includes, and with the delivered notifications too; see
// store.Feed.
func (s *Store) Snapshot(ctx context.Context) (*store.Dump, uint64, error) {
	var seq uint64
	d, err := s.loadWith(ctx, func(tx pgx.Tx) error {
		var n int64
		if err := tx.QueryRow(ctx, `SELECT seq FROM store_commits WHERE id = 1`).Scan(&n); err != nil {
			return fmt.Errorf("reading the commit count: %w", err)
		}
		seq = uint64(n)
		return nil
	}, true)
	if err != nil {
		return nil, 0, fmt.Errorf("loading store: %w", err)
	}
	return d, seq, nil
}

// Changes returns the changes after after; see store.Feed.
func (s *Store) Changes(ctx context.Context, after uint64, limit int) ([]store.Change, error) {
	if limit <= 0 {
		limit = 1000
	}
	// The commit count is read before the rows: every commit it counts is
	// visible to the rows' query, so a change it counts that the rows
	// lack was pruned, never one still committing (read after the rows, a
	// commit in between would look pruned and cost the follower a
	// snapshot).
	committed, errCommitted := s.commitCount(ctx)
	rows, err := s.pool.Query(ctx, `SELECT seq, data FROM changes WHERE seq > $1 ORDER BY seq LIMIT $2`, int64(after), limit)
	if err != nil {
		return nil, fmt.Errorf("reading changes after %d: %w", after, err)
	}
	type raw struct {
		seq  int64
		data []byte
	}
	var rs []raw
	for rows.Next() {
		var r raw
		if err := rows.Scan(&r.seq, &r.data); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reading changes after %d: %w", after, err)
		}
		rs = append(rs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading changes after %d: %w", after, err)
	}
	// A gap before the first kept change means the ones between were
	// pruned (or not recorded: written by a store that was not shared).
	if len(rs) > 0 && uint64(rs[0].seq) != after+1 || len(rs) == 0 && errCommitted == nil && committed > after {
		return nil, fmt.Errorf("changes after %d: %w", after, store.ErrChangesPruned)
	}
	out := make([]store.Change, len(rs))
	for i, r := range rs {
		var recs []json.RawMessage
		if err := json.Unmarshal(r.data, &recs); err != nil {
			return nil, fmt.Errorf("decoding change %d: %w", r.seq, err)
		}
		c := store.Change{Seq: uint64(r.seq), Batches: make([]*store.Batch, len(recs))}
		for j, rec := range recs {
			if c.Batches[j], err = encode.Unbatch(rec); err != nil {
				return nil, fmt.Errorf("change %d: %w", r.seq, err)
			}
		}
		out[i] = c
	}
	return out, nil
}

// commitCount reads how many commits the store has made.
func (s *Store) commitCount(ctx context.Context) (uint64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT seq FROM store_commits WHERE id = 1`).Scan(&n); err != nil {
		return 0, err // the next read will tell
	}
	return uint64(n), nil
}

// Wait blocks until a change notification arrives, d passes or ctx ends;
// see store.Feed. Notifications are received on one connection that
// listens from the first Wait on; when it cannot listen (a lost
// connection), Wait sleeps d, and followers poll.
func (s *Store) Wait(ctx context.Context, after uint64, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	if s.listener == nil || s.listener.IsClosed() {
		conn, err := pgx.ConnectConfig(ctx, s.cfg)
		if err == nil {
			if _, err = conn.Exec(ctx, `LISTEN `+changesChannel); err != nil {
				conn.Close(context.Background())
			}
		}
		if err != nil {
			<-ctx.Done()
			return nil
		}
		s.listener = conn
		// Commits between the caller's last read and LISTEN sent no
		// notification here: the caller reads again now.
		return nil
	}
	if _, err := s.listener.WaitForNotification(ctx); err != nil && ctx.Err() == nil {
		// Not a timeout: the connection broke; the next Wait reconnects.
		s.listener.Close(context.Background())
	}
	return nil
}
