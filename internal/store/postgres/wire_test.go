package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/encode"
	"github.com/gpufleet/gpufleet/internal/store/postgres/pgtest"
	"github.com/gpufleet/gpufleet/internal/store/storetest"
)

// countingConn counts the writes a connection makes to its socket.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestCommitIsOneWrite sends a fenced group of submissions the way the
// committer does, on a connection that counts its writes: the whole
// transaction leaves in one write, and when sendFast returns (the group
// held at its fence check by an outside lock on the lease row) the
// commit's ticket is already held, so the next group may be sent behind
// it. Then the group commits in full.
func TestCommitIsOneWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, pgtest.DSN(t), Options{Shared: true})
	l, err := s.Acquire(ctx, "controller", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	cfg := s.cfg.Copy()
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: &writes}, nil
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	group := func(g int) []batch {
		var out []batch
		for i := range 8 {
			id := fmt.Sprintf("j-%d-%d", g, i)
			seq := uint64(g*8 + i + 1)
			rows, err := encode.Batch(&store.Batch{Jobs: []*model.Job{storetest.Job(id, seq, 1)},
				Access: store.Access{Audit: []*model.AuditEntry{{Seq: seq, Action: "job.submit", Object: id}}}})
			if err != nil {
				t.Fatal(err)
			}
			change, err := encode.Change(rows)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, batch{rows: rows, fence: l.Fence(), change: change})
		}
		return out
	}
	var last int64
	if err := conn.QueryRow(ctx, readCommits).Scan(&last); err != nil {
		t.Fatal(err)
	}
	// The first group prepares the statements on the connection.
	if err := s.writeFast(ctx, conn, group(0), last+1); err != nil {
		t.Fatal(err)
	}
	// An outside transaction locks the lease row, so the group waits at
	// its fence check, after its ticket, until the probe below is done.
	hold, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `SELECT 1 FROM leases WHERE name = 'controller' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	before := writes.Load()
	w, err := s.sendFast(ctx, conn, group(1), last+2, false)
	if err != nil {
		t.Fatal(err)
	}
	if n := writes.Load() - before; n != 1 {
		t.Errorf("a commit was sent in %d writes, want 1", n)
	}
	var free bool
	if err := s.pool.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock_shared(1735423334, $1::integer)`, last+2).Scan(&free); err != nil {
		t.Fatal(err)
	}
	if free {
		t.Error("the commit's ticket is not held once its group was sent")
	}
	hold.Rollback(ctx)
	if err := s.readFast(w); err != nil {
		t.Fatal(err)
	}
	if n := writes.Load() - before; n != 1 {
		t.Errorf("a commit took %d writes, want 1", n)
	}
	var jobs, commits int64
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM jobs), (SELECT seq FROM store_commits WHERE id = 1)`).Scan(&jobs, &commits); err != nil {
		t.Fatal(err)
	}
	if jobs != 16 || commits != last+2 {
		t.Errorf("%d jobs and commit count %d stored, want 16 and %d", jobs, commits, last+2)
	}
	s.seqMu.Lock()
	s.tail = last + 2
	s.seqMu.Unlock()
}

// TestChangeRecordBeforeTheWait holds the ticket of the commit before a
// group (an outside transaction), so the group's gpufleet_commit waits:
// its change record is already written by then (an outside insert of the
// same seq waits on it), so what the next commit waits for is only the
// count and COMMIT. The group is then refused (GF002), the commit before
// it having never landed.
func TestChangeRecordBeforeTheWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, pgtest.DSN(t), Options{Shared: true})
	conn, err := pgx.ConnectConfig(ctx, s.cfg.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var last int64
	if err := conn.QueryRow(ctx, readCommits).Scan(&last); err != nil {
		t.Fatal(err)
	}
	before, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Rollback(ctx)
	if _, err := before.Exec(ctx, commitTicket, last+1); err != nil {
		t.Fatal(err)
	}
	rows, err := encode.Batch(&store.Batch{Jobs: []*model.Job{storetest.Job("j", 1, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	change, err := encode.Change(rows)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.sendFast(ctx, conn, []batch{{rows: rows, change: change}}, last+2, false)
	if err != nil {
		t.Fatal(err)
	}
	pid := conn.PgConn().PID()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var waiting bool
		if err := s.pool.QueryRow(ctx, `SELECT coalesce(bool_or(wait_event = 'advisory'), false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the group never waited for the commit before it")
		}
		time.Sleep(20 * time.Millisecond)
	}
	probe, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := probe.Exec(ctx, `SET LOCAL lock_timeout = '300ms'`); err != nil {
		t.Fatal(err)
	}
	_, err = probe.Exec(ctx, `INSERT INTO changes (seq, data) VALUES ($1, '')`, last+2)
	probe.Rollback(ctx)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Errorf("an outside insert of the waiting commit's change seq: %v; want it to wait on the group's own row (lock timeout)", err)
	}
	before.Rollback(ctx)
	if err := s.readFast(w); !errors.Is(err, errOutOfOrder) {
		t.Errorf("the group behind a commit that never landed: %v, want it refused (GF002)", err)
	}
	if err := rollback(ctx, conn); err != nil {
		t.Fatal(err)
	}
}
