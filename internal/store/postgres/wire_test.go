package postgres

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
// transaction leaves in one write, and when sendFast returns (before the
// group's outcome is read) the commit's ticket is already held, so the
// next group may be sent behind it. Then the group commits in full.
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
