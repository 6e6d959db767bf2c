package store

import (
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Cost is the cost side of a Batch or Dump (issue 6). In a Batch:
//   - Ledger entries are appended, never changed. One metering pass's
//     entries go in one batch with the Meta key recording how far metering
//     has reached (MeteredToKey, and MeterBehindKey for the nodes it held
//     back), so a pass is durable whole or not at all.
//   - BudgetFired keys are inserted once; storing a key again is harmless.
//   - Metrics are inserted once by (job, seq).
//   - Notifications are upserted by ID; a delivered one stays as a
//     tombstone so a retry after a restart never resends it.
//
// In a Dump, Ledger is every entry in append order and Notifications are
// the undelivered ones.
type Cost struct {
	Ledger        []model.LedgerEntry
	BudgetFired   []model.FiredKey
	Metrics       []MetricReport
	Notifications []*Notification
}

func (c *Cost) empty() bool {
	return len(c.Ledger)+len(c.BudgetFired)+len(c.Metrics)+len(c.Notifications) == 0
}

// MeteredToKey is the Meta key holding the end of the last metering pass
// (RFC 3339, UTC).
const MeteredToKey = "cost.metered_to"

// MeterBehindKey is the Meta key holding the nodes metered less far than
// MeteredToKey says, written in the same batch: a JSON object of node id
// to RFC 3339 time, "{}" or absent when none is. (The meter holds back only
// the nodes whose attempts' times it does not know yet.)
const MeterBehindKey = "cost.metered_behind"

// MetricReport is one report a job made: a training step and its values.
// Seq numbers a job's reports in arrival order, from 1.
type MetricReport struct {
	JobID   string       `json:"jobId"`
	Seq     int64        `json:"seq"`
	Attempt int          `json:"attempt"`
	Step    int64        `json:"step"`
	Values  MetricValues `json:"values"`
	At      time.Time    `json:"at"`
}

// Notification is one webhook delivery in the outbox: a budget firing or
// an alert. ID is stable across retries, so receivers deduplicate by it
// (at-least-once delivery). It names its receiver by reference, never by
// URL or key, so neither reaches the database (issue 9): the controller
// resolves the references when it delivers.
type Notification struct {
	ID string `json:"id"`
	// Kind is what it reports: "budget" or "alert".
	Kind string `json:"kind,omitempty"`
	// URLRef and KeyRef name the sealed secrets ("project/NAME") holding
	// the receiver's URL and signing key; empty means the server's
	// configured receiver for Kind and its webhook secret.
	URLRef string `json:"urlRef,omitempty"`
	KeyRef string `json:"keyRef,omitempty"`
	// URL is the receiver of a notification for a budget whose webhook is
	// an inline URL, the form before secret references (see
	// manifest.WebhookRef.LegacyURL), and of outbox rows written by those
	// versions, which named every receiver so. That fleet revision holds
	// the URL in clear already; no other notification sets it. It is
	// signed with the server's webhook secret.
	URL       string    `json:"url,omitempty"`
	Body      []byte    `json:"body"`
	Attempts  int       `json:"attempts"`
	NextAt    time.Time `json:"nextAt"`
	LastError string    `json:"lastError,omitempty"`
	Delivered bool      `json:"delivered,omitempty"`
	Created   time.Time `json:"created"`
}

// MetricValues are a report's values by name. NaN and ±Inf are valid
// reports (the nan policy looks for them); JSON has no such numbers, so
// they are written as the strings "NaN", "+Inf" and "-Inf".
type MetricValues map[string]float64

// MarshalJSON writes non-finite values as strings.
func (m MetricValues) MarshalJSON() ([]byte, error) {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch {
		case math.IsNaN(v):
			out[k] = "NaN"
		case math.IsInf(v, 1):
			out[k] = "+Inf"
		case math.IsInf(v, -1):
			out[k] = "-Inf"
		default:
			out[k] = v
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads numbers and the strings MarshalJSON writes.
func (m *MetricValues) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*m = make(MetricValues, len(raw))
	for k, r := range raw {
		var s string
		if json.Unmarshal(r, &s) == nil {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return err
			}
			(*m)[k] = v
			continue
		}
		var v float64
		if err := json.Unmarshal(r, &v); err != nil {
			return err
		}
		(*m)[k] = v
	}
	return nil
}
