package encode_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/encode"
	"github.com/gpufleet/gpufleet/internal/store/storetest"
)

// TestChangeRoundTrip: a batch with every kind of write comes back whole
// from its change record, token hashes included, and the batch uses every
// statement, so a statement added to encode without a decoder fails here.
func TestChangeRoundTrip(t *testing.T) {
	t0 := storetest.T0
	b := &store.Batch{
		Jobs:           []*model.Job{storetest.Job("j1", 1, 2)},
		Attempts:       []*model.Attempt{storetest.Attempt("j1", 1, 3)},
		Nodes:          []*model.Node{storetest.Node("n1", 4)},
		Tokens:         []*model.Token{storetest.Token("t1")},
		Idempotency:    []store.Idempotency{storetest.Idempotency("ada", "k", "j1", t0.Add(time.Hour))},
		Queues:         []*model.Queue{{Name: "q", Version: 2, Spec: model.QueueSpec{Weight: 2}}},
		DeleteQueues:   []string{"old"},
		Revisions:      []*model.Revision{{Number: 3, CreatedAt: t0, Author: "ada"}},
		Meta:           map[string]string{"k": "v \"quoted\""},
		Events:         []*model.Event{{Seq: 9, Time: t0, Kind: "job.queued", Object: "job/j1", Message: "a\nb"}},
		Services:       []*model.Service{{Name: "chat", Generation: 2}},
		DeleteServices: []string{"retired"},
		Cost: store.Cost{
			Ledger:        []model.LedgerEntry{{NodeID: "n1", JobID: "j1", Project: "p", Kind: "gpu", From: t0, To: t0.Add(time.Minute), Cost: 42}},
			BudgetFired:   []model.FiredKey{{Budget: "b", Threshold: 80, PeriodStart: t0}},
			Metrics:       []store.MetricReport{{JobID: "j1", Seq: 1, Step: 5, Values: store.MetricValues{"loss": 0.5}, At: t0}},
			Notifications: []*store.Notification{{ID: "n", Kind: "budget", Body: []byte(`{"x":1}`), Created: t0, NextAt: t0, Delivered: true}},
		},
		Access: store.Access{
			Grants:        []model.Grant{{User: "ada", Project: "p", Role: "member", CreatedAt: t0}},
			DeleteGrants:  []store.GrantKey{{User: "bob", Project: "p"}},
			Audit:         []*model.AuditEntry{{Seq: 7, Time: t0, Action: "POST /v1/jobs"}},
			Secrets:       []model.Secret{{Project: "p", Name: "s", Sealed: "xyz", Version: 1}},
			DeleteSecrets: []store.SecretKey{{Project: "p", Name: "gone"}},
		},
	}
	rows, err := encode.Batch(b)
	if err != nil {
		t.Fatal(err)
	}
	used := map[encode.Stmt]bool{}
	for _, r := range rows {
		used[r.Stmt] = true
	}
	for st := encode.Stmt(0); st < encode.NumStmts; st++ {
		if !used[st] {
			t.Errorf("statement %d is not in the test batch: add it here and to encode.Unbatch", st)
		}
	}
	rec, err := encode.Change(rows)
	if err != nil {
		t.Fatal(err)
	}
	got, err := encode.Unbatch(rec)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("round trip (-sent +decoded):\n%s", diff)
	}
	if string(got.Tokens[0].Hash) != string(b.Tokens[0].Hash) || len(got.Tokens[0].Hash) == 0 {
		t.Error("the token's hash did not survive the change record")
	}
	if _, err := encode.Unbatch([]byte(`[{"s":999,"a":[]}]`)); err == nil {
		t.Error("an unknown statement decoded without error")
	}
}
