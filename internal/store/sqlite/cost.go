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
