package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A group is written in one round trip: its whole transaction (BEGIN, the
// commit's ticket, the fences, the rows, the commit's count and change
// record, COMMIT) leaves in one write, as one pipeline on the extended
// protocol with one Sync at its end. A Flush request after the ticket makes
// PostgreSQL answer BEGIN and the ticket at once, while it goes on with the
// rows, so the committer knows the ticket is held (and may send the next
// group on its other connection) without a round trip of its own. Written
// with pgx.Batch, the ticket cost a round trip before the rows were sent,
// and each round trip is a wake-up of both processes, which on a busy
// machine costs more than the work.

// wire is a group's pipeline, sent and partly read.
type wire struct {
	conn *pgx.Conn
	p    *pgconn.Pipeline
	// n is how many statements were queued, read how many results were
	// read; feed is the change record's statement (-1: none), whose
	// RETURNING gives the change seq.
	n, read, feed int
	changeSeq     int64
}

// stmtName names a statement prepared on the committer's connections: a
// short hash of its SQL (PostgreSQL truncates names to 63 bytes).
func stmtName(sql string) string {
	h := fnv.New64a()
	h.Write([]byte(sql))
	return "gf_" + strconv.FormatUint(h.Sum64(), 36)
}

// sendWire writes pb's statements in one pipeline, preparing those new to
// conn first (once per connection), with a Flush request after the first
// early ones, whose results it then reads. feed is the index of the change
// record's statement (-1: none). After an error the connection may be left
// in a failed transaction: see rollback.
func sendWire(ctx context.Context, conn *pgx.Conn, pb *pgx.Batch, early, feed int) (*wire, error) {
	sds := make([]*pgconn.StatementDescription, len(pb.QueuedQueries))
	for i, q := range pb.QueuedQueries {
		sd, err := conn.Prepare(ctx, stmtName(q.SQL), q.SQL)
		if err != nil {
			return nil, classify(err, "preparing a statement")
		}
		sds[i] = sd
	}
	w := &wire{conn: conn, n: len(sds), feed: feed}
	w.p = conn.PgConn().StartPipeline(ctx)
	var eqb pgx.ExtendedQueryBuilder
	for i, q := range pb.QueuedQueries {
		if err := eqb.Build(conn.TypeMap(), sds[i], q.Arguments); err != nil {
			// End the pipeline where it stands: the statements
			// before this one run, in a transaction the caller rolls
			// back (errIsolate).
			w.n = i
			if serr := w.p.Sync(); serr == nil {
				w.p.Close()
			}
			return nil, fmt.Errorf("%w: encoding %q: %w", errIsolate, q.SQL, err)
		}
		// The pipeline keeps the result formats until it reads the
		// result; eqb reuses its slices.
		w.p.SendQueryStatement(sds[i], eqb.ParamValues, eqb.ParamFormats, append([]int16(nil), eqb.ResultFormats...))
		if i == early-1 {
			w.p.SendFlushRequest()
		}
	}
	if err := w.p.Sync(); err != nil {
		return nil, fmt.Errorf("sending a commit: %w", err)
	}
	if err := w.readTo(early); err != nil {
		return nil, err
	}
	return w, nil
}

// readTo reads results up to statement n (exclusive); after an error the
// pipeline is closed.
func (w *wire) readTo(n int) error {
	for ; w.read < n; w.read++ {
		res, err := w.p.GetResults()
		if err == nil {
			rr, ok := res.(*pgconn.ResultReader)
			switch {
			case !ok:
				err = fmt.Errorf("statement %d of a commit: unexpected result %T", w.read, res)
			case w.read == w.feed:
				err = w.scanSeq(rr)
			default:
				_, err = rr.Close()
			}
		}
		if err != nil {
			w.p.Close()
			return classify(err, "writing")
		}
	}
	return nil
}

// scanSeq reads the change seq the change record's RETURNING gives.
func (w *wire) scanSeq(rr *pgconn.ResultReader) error {
	for rr.NextRow() {
		fd := rr.FieldDescriptions()[0]
		if err := w.conn.TypeMap().Scan(fd.DataTypeOID, fd.Format, rr.Values()[0], &w.changeSeq); err != nil {
			rr.Close()
			return err
		}
	}
	_, err := rr.Close()
	return err
}

// finish reads the rest of the pipeline: every statement's result, then the
// Sync's, which PostgreSQL sends once COMMIT returned (durable, per
// synchronous_commit).
func (w *wire) finish() error {
	if err := w.readTo(w.n); err != nil {
		return err
	}
	res, err := w.p.GetResults()
	if err == nil {
		if _, ok := res.(*pgconn.PipelineSync); !ok {
			err = fmt.Errorf("a commit's pipeline: expected its sync, got %T", res)
		}
	}
	if cerr := w.p.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return classify(err, "committing")
	}
	return nil
}
