// Package storetest is the conformance suite every store.Store backend
// runs (SQLite, PostgreSQL): the behaviour the controller relies on,
// through the interface only — round trips of every kind of record, the
// version guard, group commit, a failing batch failing alone, Close
// draining the queue, idempotency expiry, audit entries written once. A
// backend's own tests cover what only it has (pragmas, triggers, marks).
// RunLeases tests a store.Leaser.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Store is what the suite tests: a store.Store that also reads its audit
// log (the API's AuditReader).
type Store interface {
	store.Store
	Audit(ctx context.Context, after uint64, limit int) ([]*model.AuditEntry, error)
}

// Options are the settings the suite asks of a backend's Open; each
// backend maps them onto its own options.
type Options struct {
	MaxBatch       int
	Clock          clock.Clock
	CommitObserver func(time.Duration, int)
}

// NewFunc makes an empty database for t and returns a function that opens
// a Store on it. The suite closes one Store before opening the next on the
// same database; the backend closes, at the end of t, every Store it
// opened (Close is safe to call twice).
type NewFunc func(t testing.TB) (open func(Options) Store)

// Run runs the suite, each test in parallel on its own database.
func Run(t *testing.T, newDB NewFunc) {
	tests := map[string]func(*testing.T, NewFunc){
		"RoundTrip":                   testRoundTrip,
		"EmptyStoreLoads":             testEmptyStoreLoads,
		"VersionGuard":                testVersionGuard,
		"UnversionedLastWriteWins":    testUnversionedLastWriteWins,
		"RevokedTokenStaysRevoked":    testRevokedTokenStaysRevoked,
		"ConcurrentSubmitters":        testConcurrentSubmitters,
		"GroupCommit":                 testGroupCommit,
		"FailedBatchFailsAlone":       testFailedBatchFailsAlone,
		"CloseDrainsQueue":            testCloseDrainsQueue,
		"SubmitAfterClose":            testSubmitAfterClose,
		"LoadDropsExpiredIdempotency": testLoadDropsExpiredIdempotency,
		"SubmitRejectsUnencodable":    testSubmitRejectsUnencodable,
		"CostRoundTrip":               testCostRoundTrip,
		"AccessRoundTrip":             testAccessRoundTrip,
		"FleetRoundTrip":              testFleetRoundTrip,
		"ServicesRoundTrip":           testServicesRoundTrip,
	}
	for name, test := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, newDB)
		})
	}
}

func commit(t testing.TB, s store.Store, b *store.Batch) {
	t.Helper()
	if err := store.Commit(context.Background(), s, b); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func load(t testing.TB, s store.Store) *store.Dump {
	t.Helper()
	d, err := s.Load(context.Background())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return d
}

func closeStore(t testing.TB, s store.Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func testRoundTrip(t *testing.T, newDB NewFunc) {
	open := newDB(t)
	s := open(Options{})
	exit := 1
	a2 := Attempt("job-b", 2, 3)
	a2.State, a2.ExitCode, a2.Reason = model.AttemptFailed, &exit, "exit status 1"
	want := &store.Dump{
		// In Seq order, which is neither id nor submit order.
		Jobs:        []*model.Job{Job("job-b", 1, 4), Job("job-a", 2, 1)},
		Attempts:    []*model.Attempt{Attempt("job-b", 1, 2), a2},
		Nodes:       []*model.Node{Node("node-1", 1), Node("node-2", 5)},
		Tokens:      []*model.Token{Token("tok-1"), Token("tok-2")},
		Idempotency: []store.Idempotency{Idempotency("ada", "k1", "job-b", time.Now().Add(time.Hour))},
		Meta:        map[string]string{"job_seq": "2", "cluster_id": "c-1"},
	}
	// Two batches, so the second's references to the first are resolved
	// across a batch boundary.
	commit(t, s, &store.Batch{Jobs: []*model.Job{want.Jobs[1], want.Jobs[0]}, Meta: want.Meta})
	commit(t, s, &store.Batch{Attempts: want.Attempts, Nodes: want.Nodes, Tokens: want.Tokens, Idempotency: want.Idempotency})
	closeStore(t, s)

	got := load(t, open(Options{}))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load after reopen (-want +got):\n%s", diff)
	}
}

func testEmptyStoreLoads(t *testing.T, newDB NewFunc) {
	s := newDB(t)(Options{})
	commit(t, s, nil)
	commit(t, s, &store.Batch{})
	if diff := cmp.Diff(&store.Dump{Meta: map[string]string{}}, load(t, s)); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
}

func testVersionGuard(t *testing.T, newDB NewFunc) {
	tests := map[string]struct {
		first, second, want uint64
	}{
		"higher replaces":       {first: 2, second: 3, want: 3},
		"equal replaces":        {first: 2, second: 2, want: 2},
		"lower is ignored":      {first: 3, second: 2, want: 3},
		"much lower is ignored": {first: 10, second: 1, want: 10},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newDB(t)(Options{})
			// Each version has its own state, so the loaded object shows
			// which write won, not only its Version field.
			batch := func(v uint64) *store.Batch {
				j := Job("job-1", 1, v)
				j.Reason = fmt.Sprintf("written at v%d", v)
				a := Attempt("job-1", 1, v)
				a.Reason = j.Reason
				n := Node("node-1", v)
				n.Name = j.Reason
				q := &model.Queue{Name: "research", Spec: model.QueueSpec{Cohort: j.Reason}, Version: v}
				return &store.Batch{Jobs: []*model.Job{j}, Attempts: []*model.Attempt{a}, Nodes: []*model.Node{n}, Queues: []*model.Queue{q}}
			}
			commit(t, s, batch(tc.first))
			commit(t, s, batch(tc.second))

			want := batch(tc.want)
			got := load(t, s)
			if diff := cmp.Diff(want.Jobs, got.Jobs); diff != "" {
				t.Errorf("jobs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want.Attempts, got.Attempts); diff != "" {
				t.Errorf("attempts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want.Nodes, got.Nodes); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want.Queues, got.Queues); diff != "" {
				t.Errorf("queues (-want +got):\n%s", diff)
			}
		})
	}
}

func testUnversionedLastWriteWins(t *testing.T, newDB NewFunc) {
	s := newDB(t)(Options{})
	tok := Token("tok-1")
	idem := Idempotency("ada", "k1", "job-1", time.Now().Add(time.Hour))
	commit(t, s, &store.Batch{Jobs: []*model.Job{Job("job-1", 1, 1), Job("job-2", 2, 1)}, Tokens: []*model.Token{tok}, Idempotency: []store.Idempotency{idem}, Meta: map[string]string{"k": "1"}})

	revoked := *tok
	revoked.Revoked = true
	idem.JobID = "job-2"
	commit(t, s, &store.Batch{Tokens: []*model.Token{&revoked}, Idempotency: []store.Idempotency{idem}, Meta: map[string]string{"k": "2"}})

	got := load(t, s)
	if diff := cmp.Diff([]*model.Token{&revoked}, got.Tokens); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]store.Idempotency{idem}, got.Idempotency); diff != "" {
		t.Errorf("idempotency (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"k": "2"}, got.Meta); diff != "" {
		t.Errorf("meta (-want +got):\n%s", diff)
	}
}

// A token's revocation is never undone, whichever of two batches that write
// the token (its mint and its revocation, from different components) lands
// last.
func testRevokedTokenStaysRevoked(t *testing.T, newDB NewFunc) {
	s := newDB(t)(Options{})
	tok := Token("tok-1")
	revoked := *tok
	revoked.Revoked = true
	commit(t, s, &store.Batch{Tokens: []*model.Token{&revoked}})
	commit(t, s, &store.Batch{Tokens: []*model.Token{tok}})
	if diff := cmp.Diff([]*model.Token{&revoked}, load(t, s).Tokens); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
}

func testConcurrentSubmitters(t *testing.T, newDB NewFunc) {
	const writers, perWriter = 16, 50
	s := newDB(t)(Options{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				id := fmt.Sprintf("job-%d-%d", w, i)
				b := &store.Batch{
					Jobs:        []*model.Job{Job(id, uint64(w*perWriter+i+1), 1)},
					Idempotency: []store.Idempotency{Idempotency(fmt.Sprint(w), id, id, time.Now().Add(time.Hour))},
				}
				if err := <-s.Submit(b); err != nil {
					t.Errorf("Submit %s: %v", id, err)
					return
				}
			}
		})
	}
	wg.Wait()

	want := map[string]bool{}
	for w := range writers {
		for i := range perWriter {
			want[fmt.Sprintf("job-%d-%d", w, i)] = true
		}
	}
	d := load(t, s)
	got := map[string]bool{}
	for _, j := range d.Jobs {
		got[j.ID] = true
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stored jobs (-want +got):\n%s", diff)
	}
	if len(d.Idempotency) != writers*perWriter {
		t.Errorf("Load returned %d idempotency records, want %d", len(d.Idempotency), writers*perWriter)
	}
}

// testGroupCommit holds the first commit open while more batches queue, and
// checks that they are then written in as few transactions as MaxBatch
// allows, in Submit order.
func testGroupCommit(t *testing.T, newDB NewFunc) {
	const n = 25
	tests := map[string]struct {
		maxBatch   int
		wantGroups []int
	}{
		"default max": {maxBatch: 0, wantGroups: []int{1, n - 1}},
		"max 10":      {maxBatch: 10, wantGroups: []int{1, 10, 10, 4}},
		"max 1":       {maxBatch: 1, wantGroups: []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			observe, entered, release, groups := HoldFirstCommit()
			s := newDB(t)(Options{MaxBatch: tc.maxBatch, CommitObserver: observe})
			// Every batch overwrites one meta key and the same job at the
			// same version: what survives shows the order they committed in.
			batch := func(i int) *store.Batch {
				j := Job("job-1", 1, 1)
				j.Reason = fmt.Sprint(i)
				return &store.Batch{Jobs: []*model.Job{j}, Meta: map[string]string{"last": fmt.Sprint(i)}}
			}
			chs := []<-chan error{s.Submit(batch(0))}
			<-entered
			for i := 1; i < n; i++ {
				chs = append(chs, s.Submit(batch(i)))
			}
			close(release)
			for i, ch := range chs {
				if err := <-ch; err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
			}

			if diff := cmp.Diff(tc.wantGroups, *groups); diff != "" && !pipelinedGroups(*groups, tc.wantGroups) {
				t.Errorf("batches per commit (-want +got):\n%s", diff)
			}
			d := load(t, s)
			last := fmt.Sprint(n - 1)
			if d.Meta["last"] != last || d.Jobs[0].Reason != last {
				t.Errorf("last write: meta %q, job reason %q; want both %q", d.Meta["last"], d.Jobs[0].Reason, last)
			}
		})
	}
}

// pipelinedGroups reports whether got is what a pipelined committer (one
// that forms and sends the next group while one is in flight, as a shared
// PostgreSQL store does) may make of the groups want: while the first group
// is held, the one group sent behind it takes what was queued by then (any
// number up to the maximum); after it, every group but the last is full,
// and no more groups are made than want's plus that one.
func pipelinedGroups(got, want []int) bool {
	if len(got) > len(want)+1 || len(want) < 2 || len(got) < 2 || got[0] != want[0] {
		return false
	}
	total := func(g []int) (n int) {
		for _, v := range g {
			n += v
		}
		return n
	}
	if total(got) != total(want) {
		return false
	}
	largest := slices.Max(want[1:])
	for _, g := range got[1:] {
		if g < 1 || g > largest {
			return false
		}
	}
	// got[1] formed while the held group was in flight, with what had
	// queued by then; every later group but the last is full.
	for _, g := range got[2 : len(got)-1] {
		if g != largest {
			return false
		}
	}
	return true
}

// testFailedBatchFailsAlone groups a batch that breaks a foreign key with
// good ones: only it fails, and none of its rows are written.
func testFailedBatchFailsAlone(t *testing.T, newDB NewFunc) {
	observe, entered, release, _ := HoldFirstCommit()
	s := newDB(t)(Options{CommitObserver: observe})
	good := func(id string) *store.Batch { return &store.Batch{Jobs: []*model.Job{Job(id, 0, 1)}} }
	bad := &store.Batch{
		Jobs:     []*model.Job{Job("job-partial", 0, 1)},
		Attempts: []*model.Attempt{Attempt("job-missing", 1, 1)},
	}

	chs := []<-chan error{s.Submit(good("job-0"))}
	<-entered
	chs = append(chs, s.Submit(good("job-1")), s.Submit(bad), s.Submit(good("job-2")))
	close(release)
	// The driver's wording of the constraint is its own; the prefix is ours.
	var errs []string
	for _, ch := range chs {
		err := <-ch
		errs = append(errs, strings.SplitN(fmt.Sprint(err), ":", 2)[0])
	}
	wantErrs := []string{"<nil>", "<nil>", "writing attempt job-missing-a1", "<nil>"}
	if diff := cmp.Diff(wantErrs, errs); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
	var ids []string
	for _, j := range load(t, s).Jobs {
		ids = append(ids, j.ID)
	}
	if diff := cmp.Diff([]string{"job-0", "job-1", "job-2"}, ids); diff != "" {
		t.Errorf("stored jobs (-want +got):\n%s", diff)
	}
}

func testCloseDrainsQueue(t *testing.T, newDB NewFunc) {
	const n = 200
	open := newDB(t)
	s := open(Options{MaxBatch: 16})
	var chs []<-chan error
	for i := range n {
		chs = append(chs, s.Submit(&store.Batch{Jobs: []*model.Job{Job(fmt.Sprintf("job-%03d", i), uint64(i), 1)}}))
	}
	closeStore(t, s)
	for i, ch := range chs {
		if err := <-ch; err != nil {
			t.Errorf("batch %d: %v", i, err)
		}
	}
	if got := len(load(t, open(Options{})).Jobs); got != n {
		t.Errorf("after Close and reopen, %d jobs stored, want %d", got, n)
	}
}

func testSubmitAfterClose(t *testing.T, newDB NewFunc) {
	s := newDB(t)(Options{})
	closeStore(t, s)
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	ch := s.Submit(&store.Batch{Jobs: []*model.Job{Job("job-1", 1, 1)}})
	if err := <-ch; !errors.Is(err, store.ErrClosed) {
		t.Errorf("Submit after Close: got %v, want %v", err, store.ErrClosed)
	}
	if _, open := <-ch; open {
		t.Errorf("Submit's channel is not closed after its error")
	}
}

// testLoadDropsExpiredIdempotency: Load returns only the live records and
// deletes the expired ones, so a store reopened with an earlier clock does
// not find them again.
func testLoadDropsExpiredIdempotency(t *testing.T, newDB NewFunc) {
	now := T0.Add(time.Hour)
	open := newDB(t)
	s := open(Options{Clock: clock.NewFake(now)})
	live := Idempotency("ada", "live", "job-1", now.Add(time.Nanosecond))
	commit(t, s, &store.Batch{
		Jobs: []*model.Job{Job("job-1", 1, 1)},
		Idempotency: []store.Idempotency{
			Idempotency("ada", "old", "job-1", now.Add(-time.Second)),
			Idempotency("ada", "now", "job-1", now),
			live,
		},
	})
	if diff := cmp.Diff([]store.Idempotency{live}, load(t, s).Idempotency); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
	closeStore(t, s)
	if diff := cmp.Diff([]store.Idempotency{live}, load(t, open(Options{Clock: clock.NewFake(T0)})).Idempotency); diff != "" {
		t.Errorf("Load with an earlier clock after the expired were dropped (-want +got):\n%s", diff)
	}
}

func testSubmitRejectsUnencodable(t *testing.T, newDB NewFunc) {
	s := newDB(t)(Options{})
	j := Job("job-nan", 1, 1)
	j.Spec.MaxPricePerHour = math.NaN()
	err := <-s.Submit(&store.Batch{Jobs: []*model.Job{j}})
	if want := "encoding job job-nan: "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Submit error = %v, want one starting %q", err, want)
	}
	if got := load(t, s).Jobs; len(got) != 0 {
		t.Errorf("Load returned %d jobs, want none", len(got))
	}
}

// testCostRoundTrip: the ledger comes back whole and in append order, fired
// keys once however often stored, metric reports with non-finite values,
// and only the undelivered notifications (a delivered one is a tombstone).
func testCostRoundTrip(t *testing.T, newDB NewFunc) {
	open := newDB(t)
	s := open(Options{})
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	alloc := model.LedgerEntry{Kind: model.LedgerAllocation, NodeID: "n-1", Pool: "gpu", Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge",
		GPUModel: "H100", CapacityType: model.Spot, PriceSource: model.PriceCatalog, PricePerHour: 98_320_000,
		JobID: "j-1", AttemptID: "a-1", Attempt: 1, Project: "nlp", User: "ada", Queue: "batch", Tags: map[string]string{"team": "nlp"},
		GPUs: 4, CPU: 32, From: t0, To: t0.Add(time.Hour), Seconds: 3600, GPUSeconds: 4 * 3600, Cost: 49_160_000,
		EffectiveCost: 36_870_000, SMActive: 0.75, Telemetry: true}
	idle := model.LedgerEntry{Kind: model.LedgerIdle, NodeID: "n-1", Pool: "gpu", Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge",
		GPUModel: "H100", CapacityType: model.Spot, PriceSource: model.PriceCatalog, PricePerHour: 98_320_000,
		From: t0, To: t0.Add(time.Hour), Seconds: 3600, GPUSeconds: 4 * 3600, Cost: 49_160_000}
	owned := model.LedgerEntry{Kind: model.LedgerIdle, NodeID: "n-2", CapacityType: model.Owned, PriceSource: "owned-unpriced",
		From: t0.Add(time.Hour), To: t0.Add(90 * time.Minute), Seconds: 1800}
	fired := model.FiredKey{Budget: "nlp-monthly", Threshold: 1, PeriodStart: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	metrics := []store.MetricReport{
		{JobID: "j-1", Seq: 1, Attempt: 1, Step: 10, Values: store.MetricValues{"loss": 1.25, "acc": 0.5}, At: t0.Add(time.Minute)},
		{JobID: "j-1", Seq: 2, Attempt: 1, Step: 11, Values: store.MetricValues{"loss": math.NaN(), "grad": math.Inf(1)}, At: t0.Add(2 * time.Minute)},
	}
	pending := &store.Notification{ID: "nlp-monthly/1/2026-03-01", Kind: "budget", URLRef: "ops/HOOK", Body: []byte(`{"id":"nlp-monthly/1/2026-03-01"}`),
		Attempts: 2, NextAt: t0.Add(5 * time.Minute), LastError: "503 Service Unavailable", Created: t0}
	delivered := &store.Notification{ID: "nlp-monthly/0/2026-03-01", Kind: "budget", URLRef: "ops/HOOK", Body: []byte(`{}`), NextAt: t0, Created: t0}

	commit(t, s, &store.Batch{Cost: store.Cost{Ledger: []model.LedgerEntry{alloc, idle}, BudgetFired: []model.FiredKey{fired},
		Notifications: []*store.Notification{delivered, pending}}, Meta: map[string]string{store.MeteredToKey: t0.Add(time.Hour).Format(time.RFC3339)}})
	done := *delivered
	done.Delivered, done.Attempts = true, 1
	commit(t, s, &store.Batch{Cost: store.Cost{Ledger: []model.LedgerEntry{owned}, BudgetFired: []model.FiredKey{fired}, Metrics: metrics,
		Notifications: []*store.Notification{&done}}})
	// A delivered notification is never revived by a late retry.
	commit(t, s, &store.Batch{Cost: store.Cost{Notifications: []*store.Notification{delivered}}})
	closeStore(t, s)

	got := load(t, open(Options{}))
	want := store.Cost{Ledger: []model.LedgerEntry{alloc, idle, owned}, BudgetFired: []model.FiredKey{fired}, Metrics: metrics,
		Notifications: []*store.Notification{pending}}
	opts := cmp.Options{cmpopts.EquateNaNs(), cmpopts.EquateEmpty()}
	if diff := cmp.Diff(want, got.Cost, opts); diff != "" {
		t.Errorf("cost after reopen (-want +got):\n%s", diff)
	}
	if m := got.Meta[store.MeteredToKey]; m != t0.Add(time.Hour).Format(time.RFC3339) {
		t.Errorf("metered to %q", m)
	}
	// Fired keys are map keys in the controller: they must come back in
	// UTC, as they were computed.
	if len(got.BudgetFired) == 1 && got.BudgetFired[0] != fired {
		t.Errorf("fired key %#v is not == %#v", got.BudgetFired[0], fired)
	}
}

// testAccessRoundTrip: grants and secrets are upserted and deleted; audit
// entries are written once (a retried or forged rewrite of a stored
// sequence number changes nothing); Load returns the audit head and Audit
// pages the log.
func testAccessRoundTrip(t *testing.T, newDB NewFunc) {
	open := newDB(t)
	s := open(Options{})
	ctx := context.Background()
	admin := model.Grant{User: "root", Project: "*", Role: model.RoleAdmin, CreatedAt: T0}
	member := model.Grant{User: "ada", Project: "nlp", Role: model.RoleMember, CreatedAt: T0}
	gone := model.Grant{User: "bob", Project: "nlp", Role: model.RoleViewer, CreatedAt: T0}
	// More than 9, so a backend ordering sequence numbers as text fails.
	audit := make([]*model.AuditEntry, 12)
	for i := range audit {
		audit[i] = &model.AuditEntry{Seq: uint64(i + 1), Time: T0.Add(time.Duration(i) * time.Second), Actor: "ada", Action: "POST /v1/jobs",
			Object: fmt.Sprintf("/v1/jobs/j-%d", i), Result: 201, PrevHash: fmt.Sprintf("h%d", i), Hash: fmt.Sprintf("h%d", i+1)}
	}
	secret := model.Secret{Project: "nlp", Name: "HF_TOKEN", Sealed: "v1:sealed", Version: 1, UpdatedAt: T0}
	commit(t, s, &store.Batch{Access: store.Access{Grants: []model.Grant{member, gone, admin}, Audit: audit[:3],
		Secrets: []model.Secret{secret, {Project: "nlp", Name: "OLD", Sealed: "v1:x", Version: 1}}}})
	promoted := member
	promoted.Role = model.RoleProjectAdmin
	forged := *audit[0]
	forged.Actor = "mallory"
	secret2 := secret
	secret2.Sealed, secret2.Version = "v1:resealed", 2
	commit(t, s, &store.Batch{Access: store.Access{Grants: []model.Grant{promoted}, DeleteGrants: []store.GrantKey{{User: "bob", Project: "nlp"}},
		Audit: append([]*model.AuditEntry{&forged}, audit[3:]...), Secrets: []model.Secret{secret2}, DeleteSecrets: []store.SecretKey{{Project: "nlp", Name: "OLD"}}}})
	closeStore(t, s)

	s = open(Options{})
	got := load(t, s)
	want := store.AccessDump{Grants: []model.Grant{promoted, admin}, AuditHead: audit[11], Secrets: []model.Secret{secret2}}
	if diff := cmp.Diff(want, got.AccessDump); diff != "" {
		t.Errorf("access after reopen (-want +got):\n%s", diff)
	}
	all, err := s.Audit(ctx, 0, 0)
	if err != nil {
		t.Fatalf("Audit: %v", err)
	}
	if diff := cmp.Diff(audit, all); diff != "" {
		t.Errorf("Audit(0, all) (-want +got):\n%s", diff)
	}
	page, err := s.Audit(ctx, 1, 2)
	if err != nil {
		t.Fatalf("Audit: %v", err)
	}
	if diff := cmp.Diff(audit[1:3], page); diff != "" {
		t.Errorf("Audit(after 1, limit 2) (-want +got):\n%s", diff)
	}
}

// testFleetRoundTrip: queues are deleted by name; revisions and events are
// written once, by number.
func testFleetRoundTrip(t *testing.T, newDB NewFunc) {
	open := newDB(t)
	s := open(Options{})
	rev := func(n int, msg string) *model.Revision {
		return &model.Revision{Number: n, CreatedAt: T0, Author: "ada", Message: msg, Digest: fmt.Sprintf("d%d", n), Documents: []json.RawMessage{json.RawMessage(`{"kind":"Queue"}`)}}
	}
	ev := func(seq uint64, msg string) *model.Event {
		return &model.Event{Seq: seq, Time: T0.Add(time.Duration(seq) * time.Second), Kind: "launch", Object: "node/n-1", Node: "n-1", Message: msg}
	}
	research := &model.Queue{Name: "research", Spec: model.QueueSpec{Weight: 2}, Version: 1}
	batch := &model.Queue{Name: "batch", Version: 1}
	commit(t, s, &store.Batch{Queues: []*model.Queue{research, batch}, Revisions: []*model.Revision{rev(1, "first")}, Events: []*model.Event{ev(1, "one"), ev(2, "two")}})
	commit(t, s, &store.Batch{DeleteQueues: []string{"batch"}, Revisions: []*model.Revision{rev(1, "rewritten"), rev(2, "second")}, Events: []*model.Event{ev(2, "rewritten"), ev(3, "three")}})
	closeStore(t, s)

	got := load(t, open(Options{}))
	if diff := cmp.Diff([]*model.Queue{research}, got.Queues); diff != "" {
		t.Errorf("queues (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]*model.Revision{rev(1, "first"), rev(2, "second")}, got.Revisions); diff != "" {
		t.Errorf("revisions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]*model.Event{ev(1, "one"), ev(2, "two"), ev(3, "three")}, got.Events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// testServicesRoundTrip: services come back whole after a reopen; an
// upsert of an older generation does not roll one back; a deleted one is
// gone, and a service applied again after its deletion starts over.
func testServicesRoundTrip(t *testing.T, newDB NewFunc) {
	open := newDB(t)
	s := open(Options{})
	svc := func(name string, gen int, reply string) *model.Service {
		return &model.Service{Name: name, Project: "nlp", User: "ada", Generation: gen, CreatedAt: T0, UpdatedAt: T0.Add(time.Duration(gen) * time.Minute),
			Tags: map[string]string{"team": "a"},
			Spec: model.ServiceSpec{Port: 8000, Template: model.JobSpec{Replicas: 1, Run: model.RunSpec{Command: []string{"serve"}, Env: map[string]string{"REPLY": reply}}},
				Replicas: model.ServiceReplicas{Min: 0, Max: 4}, Autoscaling: model.ServiceAutoscaling{Metric: model.ScaleOnInFlight, Target: 8},
				Auth: model.ServiceAuth{Mode: model.AuthAPIKey, Secrets: []string{"LLM_KEY"}}}}
	}
	commit(t, s, &store.Batch{Services: []*model.Service{svc("llm", 1, "v1"), svc("old", 1, "x"), svc("again", 3, "x")}})
	commit(t, s, &store.Batch{Services: []*model.Service{svc("llm", 2, "v2")}})
	commit(t, s, &store.Batch{Services: []*model.Service{svc("llm", 1, "late")}, DeleteServices: []string{"old", "again"}})
	commit(t, s, &store.Batch{Services: []*model.Service{svc("again", 1, "new")}})
	closeStore(t, s)

	got := load(t, open(Options{}))
	want := []*model.Service{svc("again", 1, "new"), svc("llm", 2, "v2")}
	if diff := cmp.Diff(want, got.Services); diff != "" {
		t.Errorf("services (-want +got):\n%s", diff)
	}
}
