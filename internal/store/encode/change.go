package encode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// A change record is what a backend with a change feed (store.Feed) keeps
// of one committed batch, so that replicas following the store can apply
// the batch to their own copy of the state without reading the tables:
// the batch's rows, each its statement and arguments, the JSON data column
// embedded as it is (already JSON: it is not escaped again). Decoding
// gives back the batch (Unbatch), objects whole, so a follower applies the
// same statements in memory (package replica).

// wireRow is one row of a change record.
type wireRow struct {
	S Stmt              `json:"s"`
	A []json.RawMessage `json:"a"`
}

// hasData reports whether st's last argument is a JSON data column.
func hasData(st Stmt) bool {
	switch st {
	case UpsertIdempotency, UpsertMeta, DeleteQueue, DeleteService, DeleteGrant, DeleteSecret, InsertFired:
		return false
	}
	return true
}

// Change encodes one batch's rows (from Batch) as a change record.
func Change(rows []Row) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, r := range rows {
		if r.Stmt < 0 || r.Stmt >= NumStmts {
			return nil, fmt.Errorf("change record: unknown statement %d for %s %s", r.Stmt, r.Kind, r.ID)
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"s":%d,"a":[`, r.Stmt)
		for j, a := range r.Args {
			if j > 0 {
				buf.WriteByte(',')
			}
			if j == len(r.Args)-1 && hasData(r.Stmt) {
				s, ok := a.(string)
				if !ok {
					return nil, fmt.Errorf("change record: %s %s: data column is %T, not JSON text", r.Kind, r.ID, a)
				}
				buf.WriteString(s)
				continue
			}
			if err := appendJSON(&buf, a); err != nil {
				return nil, fmt.Errorf("change record: %s %s: %w", r.Kind, r.ID, err)
			}
		}
		buf.WriteString("]}")
	}
	buf.WriteByte(']')
	return buf.Bytes(), nil
}

// appendJSON appends a to buf as json.Marshal writes it. The arguments of
// a submission's rows are integers and plain strings (ids, names, times),
// which it writes without reflection or an allocation; anything else goes
// through json.Marshal.
func appendJSON(buf *bytes.Buffer, a any) error {
	switch v := a.(type) {
	case int64:
		buf.Write(strconv.AppendInt(buf.AvailableBuffer(), v, 10))
		return nil
	case uint64:
		buf.Write(strconv.AppendUint(buf.AvailableBuffer(), v, 10))
		return nil
	case int:
		buf.Write(strconv.AppendInt(buf.AvailableBuffer(), int64(v), 10))
		return nil
	case string:
		if plainJSON(v) {
			buf.WriteByte('"')
			buf.WriteString(v)
			buf.WriteByte('"')
			return nil
		}
	}
	data, err := json.Marshal(a)
	if err != nil {
		return err
	}
	buf.Write(data)
	return nil
}

// plainJSON reports whether json.Marshal writes s as it is between quotes:
// printable ASCII without the characters it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// Unbatch decodes a change record back into the batch it was made of.
// Objects are whole; their order within each kind is the rows' (the order
// they were written in).
func Unbatch(record []byte) (*store.Batch, error) {
	var rows []wireRow
	if err := json.Unmarshal(record, &rows); err != nil {
		return nil, fmt.Errorf("decoding change record: %w", err)
	}
	b := &store.Batch{}
	for i, r := range rows {
		if err := unrow(b, r); err != nil {
			return nil, fmt.Errorf("decoding change record row %d (statement %d): %w", i, r.S, err)
		}
	}
	return b, nil
}

// unrow adds one row's object to b.
func unrow(b *store.Batch, r wireRow) error {
	want := map[Stmt]int{UpsertJob: 6, UpsertAttempt: 4, UpsertNode: 3, UpsertToken: 3, UpsertIdempotency: 5, UpsertMeta: 2,
		UpsertQueue: 3, DeleteQueue: 1, InsertRevision: 3, InsertEvent: 5, UpsertGrant: 3, DeleteGrant: 2, InsertAudit: 3,
		UpsertSecret: 3, DeleteSecret: 2, InsertLedger: 7, InsertFired: 3, InsertMetric: 3, UpsertNotification: 3,
		UpsertService: 3, DeleteService: 1}
	n, known := want[r.S]
	if !known {
		return fmt.Errorf("unknown statement (written by a newer gpufleet?)")
	}
	if len(r.A) != n {
		return fmt.Errorf("%d arguments, want %d", len(r.A), n)
	}
	data := r.A[n-1]
	// arg decodes argument i into v.
	arg := func(i int, v any) error { return json.Unmarshal(r.A[i], v) }
	switch r.S {
	case UpsertJob:
		return appendObj(&b.Jobs, data)
	case UpsertAttempt:
		return appendObj(&b.Attempts, data)
	case UpsertNode:
		return appendObj(&b.Nodes, data)
	case UpsertToken:
		t := new(model.Token)
		if err := json.Unmarshal(data, t); err != nil {
			return err
		}
		if err := arg(1, &t.Hash); err != nil { // kept out of the JSON
			return err
		}
		b.Tokens = append(b.Tokens, t)
	case UpsertIdempotency:
		var rec store.Idempotency
		var expires string
		for i, v := range []any{&rec.Subject, &rec.Key, &rec.JobID, &rec.BodyHash, &expires} {
			if err := arg(i, v); err != nil {
				return err
			}
		}
		var err error
		if rec.Expires, err = ParseTime(expires); err != nil {
			return err
		}
		b.Idempotency = append(b.Idempotency, rec)
	case UpsertMeta:
		var k, v string
		if err := arg(0, &k); err != nil {
			return err
		}
		if err := arg(1, &v); err != nil {
			return err
		}
		if b.Meta == nil {
			b.Meta = map[string]string{}
		}
		b.Meta[k] = v
	case UpsertQueue:
		return appendObj(&b.Queues, data)
	case DeleteQueue:
		var name string
		if err := arg(0, &name); err != nil {
			return err
		}
		b.DeleteQueues = append(b.DeleteQueues, name)
	case UpsertService:
		return appendObj(&b.Services, data)
	case DeleteService:
		var name string
		if err := arg(0, &name); err != nil {
			return err
		}
		b.DeleteServices = append(b.DeleteServices, name)
	case InsertRevision:
		return appendObj(&b.Revisions, data)
	case InsertEvent:
		return appendObj(&b.Events, data)
	case UpsertGrant:
		var g model.Grant
		if err := json.Unmarshal(data, &g); err != nil {
			return err
		}
		b.Grants = append(b.Grants, g)
	case DeleteGrant:
		var k store.GrantKey
		if err := arg(0, &k.User); err != nil {
			return err
		}
		if err := arg(1, &k.Project); err != nil {
			return err
		}
		b.DeleteGrants = append(b.DeleteGrants, k)
	case InsertAudit:
		return appendObj(&b.Audit, data)
	case UpsertSecret:
		var s model.Secret
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		b.Secrets = append(b.Secrets, s)
	case DeleteSecret:
		var k store.SecretKey
		if err := arg(0, &k.Project); err != nil {
			return err
		}
		if err := arg(1, &k.Name); err != nil {
			return err
		}
		b.DeleteSecrets = append(b.DeleteSecrets, k)
	case InsertLedger:
		var e model.LedgerEntry
		if err := json.Unmarshal(data, &e); err != nil {
			return err
		}
		b.Ledger = append(b.Ledger, e)
	case InsertFired:
		var k model.FiredKey
		var start string
		if err := arg(0, &k.Budget); err != nil {
			return err
		}
		if err := arg(1, &k.Threshold); err != nil {
			return err
		}
		if err := arg(2, &start); err != nil {
			return err
		}
		var err error
		if k.PeriodStart, err = time.Parse(time.RFC3339, start); err != nil {
			return err
		}
		b.BudgetFired = append(b.BudgetFired, k)
	case InsertMetric:
		var m store.MetricReport
		if err := json.Unmarshal(data, &m); err != nil {
			return err
		}
		b.Metrics = append(b.Metrics, m)
	case UpsertNotification:
		return appendObj(&b.Notifications, data)
	}
	return nil
}

func appendObj[T any](to *[]*T, data []byte) error {
	v := new(T)
	if err := json.Unmarshal(data, v); err != nil {
		return err
	}
	*to = append(*to, v)
	return nil
}
