package postgres

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/gpufleet/gpufleet/internal/store/encode"
)

// A group of the API's submissions repeats a few statements once per
// batch (a job, its idempotency key, its audit entry); the scheduler's and
// the agents' groups repeat jobs, attempts and events. Sent one row each,
// every row costs PostgreSQL a statement's execution. writeFast sends each
// of these statements once per group instead, its rows as arrays unnested
// into one INSERT … SELECT with the same conflict rule as the one-row form
// (stmtSQL).

// multiStmt is the multi-row form of one statement.
type multiStmt struct {
	sql string
	// cols has one letter per argument of the one-row form, its array
	// type: t text, i bigint, b bytea.
	cols string
	// keys is how many leading arguments make the conflict key.
	keys int
	// version is the argument that guards the upsert (the row with the
	// highest version wins, the later of equals), or lastWins (an
	// unguarded upsert) or firstWins (DO NOTHING).
	version int
}

const (
	lastWins  = -1
	firstWins = -2
)

// multiSQL is indexed by statement; an empty sql has no multi-row form.
// multiOrder is the order they are sent in: parents before the rows that
// reference them (attempts and idempotency keys reference jobs).
var (
	multiSQL = [encode.NumStmts]multiStmt{
		encode.UpsertJob: {cols: "tittit", keys: 1, version: 4, sql: `INSERT INTO jobs (id, seq, state, project, version, data)
			SELECT id, seq, state, project, version, data::json
			FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::text[]) AS r(id, seq, state, project, version, data)
			ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, state = excluded.state, project = excluded.project,
				version = excluded.version, data = excluded.data
			WHERE excluded.version >= jobs.version`},
		encode.UpsertAttempt: {cols: "ttit", keys: 1, version: 2, sql: `INSERT INTO attempts (id, job_id, version, data)
			SELECT id, job_id, version, data::json
			FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS r(id, job_id, version, data)
			ON CONFLICT (id) DO UPDATE SET job_id = excluded.job_id, version = excluded.version, data = excluded.data
			WHERE excluded.version >= attempts.version`},
		encode.UpsertIdempotency: {cols: "tttbt", keys: 2, version: lastWins, sql: `INSERT INTO idempotency (subject, key, job_id, body_hash, expires)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[])
			ON CONFLICT (subject, key) DO UPDATE SET job_id = excluded.job_id, body_hash = excluded.body_hash,
				expires = excluded.expires`},
		encode.InsertEvent: {cols: "itttt", keys: 1, version: firstWins, sql: `INSERT INTO events (seq, time, kind, object, data)
			SELECT seq, time, kind, object, data::json
			FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[]) AS r(seq, time, kind, object, data)
			ON CONFLICT (seq) DO NOTHING`},
		encode.InsertAudit: {cols: "itt", keys: 1, version: firstWins, sql: `INSERT INTO audit (seq, time, data)
			SELECT seq, time, data::json FROM unnest($1::bigint[], $2::text[], $3::text[]) AS r(seq, time, data)
			ON CONFLICT (seq) DO NOTHING`},
	}
	multiOrder = []encode.Stmt{encode.UpsertJob, encode.UpsertAttempt, encode.UpsertIdempotency, encode.InsertEvent, encode.InsertAudit}
)

// queueRows queues group's rows in pb: the statements of multiSQL first,
// each once with all its rows (or in its one-row form when it has one),
// then every other row in group order. Within a group only the rows of one
// statement on one key need an order, which the multi-row form keeps by
// sending the row the one-row forms in order would have left (dedupe).
func queueRows(pb *pgx.Batch, group []batch) error {
	var (
		many [encode.NumStmts][]*encode.Row
		rest []*encode.Row
	)
	for i := range group {
		for j := range group[i].rows {
			r := &group[i].rows[j]
			if multiSQL[r.Stmt].sql != "" {
				many[r.Stmt] = append(many[r.Stmt], r)
			} else {
				rest = append(rest, r)
			}
		}
	}
	for _, st := range multiOrder {
		switch rows := many[st]; len(rows) {
		case 0:
		case 1:
			pb.Queue(stmtSQL[st], rows[0].Args...)
		default:
			m := &multiSQL[st]
			args, err := m.arrays(m.dedupe(rows))
			if err != nil {
				return err
			}
			pb.Queue(m.sql, args...)
		}
	}
	for _, r := range rest {
		pb.Queue(stmtSQL[r.Stmt], r.Args...)
	}
	return nil
}

// dedupe keeps one row per key: the one the one-row statements, run in
// order, would have left in the table. One INSERT … ON CONFLICT DO UPDATE
// may not touch a row twice.
func (m *multiStmt) dedupe(rows []*encode.Row) []*encode.Row {
	at := make(map[string]int, len(rows))
	out := make([]*encode.Row, 0, len(rows))
	for _, r := range rows {
		k := rowKey(r.Args[:m.keys])
		i, seen := at[k]
		switch {
		case !seen:
			at[k] = len(out)
			out = append(out, r)
		case m.version == lastWins:
			out[i] = r
		case m.version >= 0:
			v, _ := int64Of(r.Args[m.version])
			old, _ := int64Of(out[i].Args[m.version])
			if v >= old {
				out[i] = r
			}
		}
	}
	return out
}

// arrays turns rows' arguments into one array per column.
func (m *multiStmt) arrays(rows []*encode.Row) ([]any, error) {
	args := make([]any, len(m.cols))
	for c, kind := range []byte(m.cols) {
		switch kind {
		case 't':
			col := make([]string, len(rows))
			for i, r := range rows {
				s, ok := r.Args[c].(string)
				if !ok {
					return nil, r.Err(fmt.Errorf("argument %d is %T, not text", c+1, r.Args[c]))
				}
				col[i] = s
			}
			args[c] = col
		case 'i':
			col := make([]int64, len(rows))
			for i, r := range rows {
				v, ok := int64Of(r.Args[c])
				if !ok {
					return nil, r.Err(fmt.Errorf("argument %d is %T, not an integer", c+1, r.Args[c]))
				}
				col[i] = v
			}
			args[c] = col
		case 'b':
			col := make([][]byte, len(rows))
			for i, r := range rows {
				b, ok := r.Args[c].([]byte)
				if !ok {
					return nil, r.Err(fmt.Errorf("argument %d is %T, not bytes", c+1, r.Args[c]))
				}
				col[i] = b
			}
			args[c] = col
		}
	}
	return args, nil
}

// int64Of reads an integer argument as PostgreSQL's bigint.
func int64Of(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case uint64:
		return int64(n), true
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case uint32:
		return int64(n), true
	}
	return 0, false
}

// rowKey is a conflict key's arguments as one map key.
func rowKey(args []any) string {
	if len(args) == 1 {
		if s, ok := args[0].(string); ok {
			return s
		}
		if n, ok := int64Of(args[0]); ok {
			return strconv.FormatInt(n, 10)
		}
	}
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = fmt.Sprint(a)
	}
	return strings.Join(parts, "\x00")
}
