// Package encode turns a store.Batch into rows that every SQL backend
// writes the same way: a statement (by name; each backend holds its own SQL
// for it) and its arguments, the object stored whole as JSON beside the few
// columns SQL needs (keys, version, seq). It also decodes those JSON columns
// back, on every CPU. Sharing it keeps the backends' encodings identical,
// so a database can be copied from one to the other row by row.
//
// Argument types are plain: strings, int64/uint64, []byte; times are text in
// a fixed-width UTC layout (TimeLayout) so they compare as strings in time
// order in both SQLite and PostgreSQL (with the C collation).
package encode

import (
	"cmp"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/gpufleet/gpufleet/internal/store"
)

// Stmt names one write statement. Each backend has the SQL of every Stmt,
// with the arguments in the order the comment gives.
type Stmt int

const (
	UpsertJob          Stmt = iota // id, seq, state, project, version, data
	UpsertAttempt                  // id, job_id, version, data
	UpsertNode                     // id, version, data
	UpsertToken                    // id, hash, data
	UpsertIdempotency              // subject, key, job_id, body_hash, expires
	UpsertMeta                     // key, value
	UpsertQueue                    // name, version, data
	DeleteQueue                    // name
	InsertRevision                 // number, digest, data
	InsertEvent                    // seq, time, kind, object, data
	UpsertGrant                    // user, project, data
	DeleteGrant                    // user, project
	InsertAudit                    // seq, time, data
	UpsertSecret                   // project, name, data
	DeleteSecret                   // project, name
	InsertLedger                   // from_unix, to_unix, kind, job_id, project, cost, data
	InsertFired                    // budget, threshold, period_start
	InsertMetric                   // job_id, seq, data
	UpsertNotification             // id, delivered (0 or 1), data
	UpsertService                  // name, generation, data
	DeleteService                  // name
	// NumStmts counts the statements; a backend numbers its own extra
	// statements from it.
	NumStmts
)

// Row is one statement, ready to run, and the object it writes, for errors.
type Row struct {
	Stmt     Stmt
	Args     []any
	Kind, ID string
}

// Err wraps a row's failure as every backend reports it.
func (r *Row) Err(err error) error { return fmt.Errorf("writing %s %s: %w", r.Kind, r.ID, err) }

// TimeLayout writes times as fixed-width UTC text, so SQL compares them as
// strings in time order.
const TimeLayout = "2006-01-02T15:04:05.000000000Z"

// Time formats t in TimeLayout.
func Time(t time.Time) string { return t.UTC().Format(TimeLayout) }

// ParseTime reads a time written by Time.
func ParseTime(s string) (time.Time, error) { return time.Parse(TimeLayout, s) }

// Batch turns b into rows, jobs before the attempts and idempotency records
// that refer to them. Callers run it on their own goroutine, so JSON
// encoding runs in parallel and a committer's serial work is only SQL. A
// fence is not a row: the backend checks it.
func Batch(b *store.Batch) ([]Row, error) {
	if b.Empty() {
		return nil, nil
	}
	rows := make([]Row, 0, len(b.Jobs)+len(b.Attempts)+len(b.Nodes)+len(b.Tokens)+len(b.Idempotency)+len(b.Meta)+
		len(b.Queues)+len(b.DeleteQueues)+len(b.Revisions)+len(b.Events)+len(b.Grants)+len(b.DeleteGrants)+len(b.Audit)+
		len(b.Secrets)+len(b.DeleteSecrets)+len(b.Services)+len(b.DeleteServices))
	// add appends a row whose arguments are args and v as JSON, the data
	// column.
	add := func(st Stmt, kind, id string, v any, args ...any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding %s %s: %w", kind, id, err)
		}
		all := make([]any, len(args)+1)
		// data is Marshal's own, never written again: it becomes the
		// string without a copy (one per row saved the submit path
		// about 5% of its allocated bytes).
		all[copy(all, args)] = unsafe.String(unsafe.SliceData(data), len(data))
		rows = append(rows, Row{Stmt: st, Args: all, Kind: kind, ID: id})
		return nil
	}
	for _, j := range b.Jobs {
		if err := add(UpsertJob, "job", j.ID, j, j.ID, j.Seq, string(j.State), j.Project, j.Version); err != nil {
			return nil, err
		}
	}
	for _, a := range b.Attempts {
		if err := add(UpsertAttempt, "attempt", a.ID, a, a.ID, a.JobID, a.Version); err != nil {
			return nil, err
		}
	}
	for _, n := range b.Nodes {
		if err := add(UpsertNode, "node", n.ID, n, n.ID, n.Version); err != nil {
			return nil, err
		}
	}
	for _, t := range b.Tokens {
		if err := add(UpsertToken, "token", t.ID, t, t.ID, t.Hash); err != nil {
			return nil, err
		}
	}
	for _, r := range b.Idempotency {
		rows = append(rows, Row{
			Stmt: UpsertIdempotency,
			Args: []any{r.Subject, r.Key, r.JobID, r.BodyHash, Time(r.Expires)},
			Kind: "idempotency key", ID: r.Subject + "/" + r.Key,
		})
	}
	for _, q := range b.Queues {
		if err := add(UpsertQueue, "queue", q.Name, q, q.Name, q.Version); err != nil {
			return nil, err
		}
	}
	for _, name := range b.DeleteQueues {
		rows = append(rows, Row{Stmt: DeleteQueue, Args: []any{name}, Kind: "queue deletion", ID: name})
	}
	for _, s := range b.Services {
		if err := add(UpsertService, "service", s.Name, s, s.Name, int64(s.Generation)); err != nil {
			return nil, err
		}
	}
	for _, name := range b.DeleteServices {
		rows = append(rows, Row{Stmt: DeleteService, Args: []any{name}, Kind: "service deletion", ID: name})
	}
	for _, r := range b.Revisions {
		if err := add(InsertRevision, "revision", fmt.Sprint(r.Number), r, r.Number, r.Digest); err != nil {
			return nil, err
		}
	}
	for _, e := range b.Events {
		if err := add(InsertEvent, "event", fmt.Sprint(e.Seq), e, e.Seq, Time(e.Time), string(e.Kind), e.Object); err != nil {
			return nil, err
		}
	}
	for _, g := range b.Grants {
		if err := add(UpsertGrant, "grant", g.User+"/"+g.Project, g, g.User, g.Project); err != nil {
			return nil, err
		}
	}
	for _, k := range b.DeleteGrants {
		rows = append(rows, Row{Stmt: DeleteGrant, Args: []any{k.User, k.Project}, Kind: "grant deletion", ID: k.User + "/" + k.Project})
	}
	for _, e := range b.Audit {
		if err := add(InsertAudit, "audit entry", strconv.FormatUint(e.Seq, 10), e, e.Seq, Time(e.Time)); err != nil {
			return nil, err
		}
	}
	for _, sec := range b.Secrets {
		if err := add(UpsertSecret, "secret", sec.Project+"/"+sec.Name, sec, sec.Project, sec.Name); err != nil {
			return nil, err
		}
	}
	for _, k := range b.DeleteSecrets {
		rows = append(rows, Row{Stmt: DeleteSecret, Args: []any{k.Project, k.Name}, Kind: "secret deletion", ID: k.Project + "/" + k.Name})
	}
	costRows, err := cost(&b.Cost)
	if err != nil {
		return nil, err
	}
	rows = append(rows, costRows...)
	for k, v := range b.Meta {
		rows = append(rows, Row{Stmt: UpsertMeta, Args: []any{k, v}, Kind: "meta", ID: k})
	}
	return rows, nil
}

// cost turns the cost side of a batch into rows (see store.Cost).
func cost(c *store.Cost) ([]Row, error) {
	if len(c.Ledger)+len(c.BudgetFired)+len(c.Metrics)+len(c.Notifications) == 0 {
		return nil, nil
	}
	rows := make([]Row, 0, len(c.Ledger)+len(c.BudgetFired)+len(c.Metrics)+len(c.Notifications))
	for i := range c.Ledger {
		e := &c.Ledger[i]
		data, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("encoding ledger entry for node %s: %w", e.NodeID, err)
		}
		rows = append(rows, Row{Stmt: InsertLedger, Kind: "ledger entry", ID: e.NodeID + "/" + e.JobID,
			Args: []any{e.From.Unix(), e.To.Unix(), string(e.Kind), e.JobID, e.Project, int64(e.Cost), string(data)}})
	}
	for _, k := range c.BudgetFired {
		rows = append(rows, Row{Stmt: InsertFired, Kind: "budget firing", ID: k.Budget,
			Args: []any{k.Budget, k.Threshold, k.PeriodStart.UTC().Format(time.RFC3339)}})
	}
	for _, m := range c.Metrics {
		data, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("encoding metric report %s/%d: %w", m.JobID, m.Seq, err)
		}
		rows = append(rows, Row{Stmt: InsertMetric, Kind: "metric report", ID: fmt.Sprintf("%s/%d", m.JobID, m.Seq),
			Args: []any{m.JobID, m.Seq, string(data)}})
	}
	for _, n := range c.Notifications {
		data, err := json.Marshal(n)
		if err != nil {
			return nil, fmt.Errorf("encoding notification %s: %w", n.ID, err)
		}
		delivered := 0
		if n.Delivered {
			delivered = 1
		}
		rows = append(rows, Row{Stmt: UpsertNotification, Kind: "notification", ID: n.ID,
			Args: []any{n.ID, delivered, string(data)}})
	}
	return rows, nil
}

// Raw is an undecoded (id, data) row.
type Raw struct {
	ID   string
	Data []byte
}

// Decode decodes rows' data as Ts on every CPU, keeping their order, and
// reports the first row that fails, naming it by kind and id. JSON
// decoding, not the database, is most of a large Load.
func Decode[T any](kind string, rows []Raw) ([]*T, error) {
	out := make([]*T, len(rows))
	errs := make([]error, len(rows))
	per := max(1, (len(rows)+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for lo := 0; lo < len(rows); lo += per {
		wg.Go(func() {
			for i := lo; i < min(lo+per, len(rows)); i++ {
				out[i] = new(T)
				if err := json.Unmarshal(rows[i].Data, out[i]); err != nil {
					errs[i] = fmt.Errorf("decoding %s %s: %w", kind, rows[i].ID, err)
				}
			}
		})
	}
	wg.Wait()
	return out, cmp.Or(errs...)
}
