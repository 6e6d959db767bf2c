package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// encodeCost turns the cost side of a batch into rows (see store.Cost).
func encodeCost(c *store.Cost) ([]row, error) {
	if len(c.Ledger)+len(c.BudgetFired)+len(c.Metrics)+len(c.Notifications) == 0 {
		return nil, nil
	}
	rows := make([]row, 0, len(c.Ledger)+len(c.BudgetFired)+len(c.Metrics)+len(c.Notifications))
	for i := range c.Ledger {
		e := &c.Ledger[i]
		data, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("encoding ledger entry for node %s: %w", e.NodeID, err)
		}
		rows = append(rows, row{stmt: insertLedger, kind: "ledger entry", id: e.NodeID + "/" + e.JobID,
			args: []any{e.From.Unix(), e.To.Unix(), string(e.Kind), e.JobID, e.Project, int64(e.Cost), string(data)}})
	}
	for _, k := range c.BudgetFired {
		rows = append(rows, row{stmt: insertFired, kind: "budget firing", id: k.Budget,
			args: []any{k.Budget, k.Threshold, k.PeriodStart.UTC().Format(time.RFC3339)}})
	}
	for _, m := range c.Metrics {
		data, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("encoding metric report %s/%d: %w", m.JobID, m.Seq, err)
		}
		rows = append(rows, row{stmt: insertMetric, kind: "metric report", id: fmt.Sprintf("%s/%d", m.JobID, m.Seq),
			args: []any{m.JobID, m.Seq, string(data)}})
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
		rows = append(rows, row{stmt: upsertNotification, kind: "notification", id: n.ID,
			args: []any{n.ID, delivered, string(data)}})
	}
	return rows, nil
}

// loadCost reads the ledger in append order, the fired keys, every metric
// report and the undelivered notifications.
func loadCost(ctx context.Context, tx *sql.Tx, d *store.Dump) error {
	err := each(ctx, tx, `SELECT id, data FROM ledger_entries ORDER BY id`, func(r *sql.Rows) error {
		var id int64
		var data []byte
		if err := r.Scan(&id, &data); err != nil {
			return fmt.Errorf("reading ledger entry: %w", err)
		}
		var e model.LedgerEntry
		if err := json.Unmarshal(data, &e); err != nil {
			return fmt.Errorf("decoding ledger entry %d: %w", id, err)
		}
		d.Ledger = append(d.Ledger, e)
		return nil
	})
	if err != nil {
		return err
	}
	err = each(ctx, tx, `SELECT budget, threshold, period_start FROM budget_fired ORDER BY budget, period_start, threshold`, func(r *sql.Rows) error {
		var k model.FiredKey
		var start string
		if err := r.Scan(&k.Budget, &k.Threshold, &start); err != nil {
			return fmt.Errorf("reading budget firing: %w", err)
		}
		t, err := time.Parse(time.RFC3339, start)
		if err != nil {
			return fmt.Errorf("decoding budget firing %s: %w", k.Budget, err)
		}
		k.PeriodStart = t
		d.BudgetFired = append(d.BudgetFired, k)
		return nil
	})
	if err != nil {
		return err
	}
	err = each(ctx, tx, `SELECT job_id, seq, data FROM metric_reports ORDER BY job_id, seq`, func(r *sql.Rows) error {
		var m store.MetricReport
		var data []byte
		if err := r.Scan(&m.JobID, &m.Seq, &data); err != nil {
			return fmt.Errorf("reading metric report: %w", err)
		}
		if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("decoding metric report %s/%d: %w", m.JobID, m.Seq, err)
		}
		d.Metrics = append(d.Metrics, m)
		return nil
	})
	if err != nil {
		return err
	}
	return each(ctx, tx, `SELECT id, data FROM notifications WHERE delivered = 0 ORDER BY id`, func(r *sql.Rows) error {
		var id string
		var data []byte
		if err := r.Scan(&id, &data); err != nil {
			return fmt.Errorf("reading notification: %w", err)
		}
		n := &store.Notification{}
		if err := json.Unmarshal(data, n); err != nil {
			return fmt.Errorf("decoding notification %s: %w", id, err)
		}
		d.Notifications = append(d.Notifications, n)
		return nil
	})
}
