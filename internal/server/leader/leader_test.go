package leader_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpufleet/gpufleet/internal/server/leader"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/postgres"
	"github.com/gpufleet/gpufleet/internal/store/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func open(t *testing.T, dsn string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func elector(t *testing.T, l store.Leaser, id string, reg prometheus.Registerer) *leader.Elector {
	t.Helper()
	e, err := leader.New(leader.Config{Leaser: l, ID: id, URL: "http://" + id + ":7777", Registry: reg,
		TTL: 1500 * time.Millisecond, RenewInterval: 200 * time.Millisecond, RenewDeadline: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestOneLeaderThenTakeover: of two replicas one leads; the other follows,
// naming it; the leader's clean exit (Release) hands over at once, to a
// new epoch; the metrics follow.
func TestOneLeaderThenTakeover(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a, b := elector(t, open(t, dsn), "a", regA), elector(t, open(t, dsn), "b", regB)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	la, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holdCtx, stopHold := context.WithCancel(ctx)
	held := make(chan error, 1)
	go func() { held <- a.Hold(holdCtx, la) }()

	won := make(chan store.Lease, 1)
	go func() {
		lb, err := b.Campaign(ctx)
		if err != nil {
			t.Error(err)
		}
		won <- lb
	}()
	// b follows, naming a, for several of a's renewals (past a's first TTL).
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-won:
			t.Fatal("b leads while a holds and renews the lease")
		case <-time.After(100 * time.Millisecond):
		}
	}
	if l, self := b.Current(); self || l.ID != "a" || l.URL != "http://a:7777" || l.Epoch != la.Epoch {
		t.Fatalf("b sees leader %+v (self %v), want a at epoch %d", l, self, la.Epoch)
	}
	if got := testutil.ToFloat64(a.Metrics().Leader); got != 1 {
		t.Errorf("gpufleet_leader on a = %v, want 1", got)
	}
	if got := testutil.ToFloat64(b.Metrics().Leader); got != 0 {
		t.Errorf("gpufleet_leader on b = %v, want 0", got)
	}

	stopHold()
	if err := <-held; err != nil {
		t.Fatalf("Hold after its context ended: %v", err)
	}
	released := time.Now()
	if err := a.Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	lb := <-won
	if took := time.Since(released); took > time.Second {
		t.Errorf("b took over %s after a released, want within one campaign interval", took)
	}
	if lb.Epoch != la.Epoch+1 || !strings.HasPrefix(lb.Holder, "b ") {
		t.Errorf("b's lease = %+v, want the epoch after %d", lb, la.Epoch)
	}
	if got := testutil.ToFloat64(b.Metrics().Changes); got != 2 {
		t.Errorf("gpufleet_leader_changes_total on b = %v, want 2 (a's term, then b's)", got)
	}
	if n, err := testutil.GatherAndCount(regB, "gpufleet_leader", "gpufleet_leader_changes_total"); err != nil || n != 2 {
		t.Errorf("b's registry has %d leader series (%v), want 2", n, err)
	}
}

// stalled is a Leaser whose renewals hang until their context ends: a
// leader cut off from the database.
type stalled struct{ store.Leaser }

func (stalled) Renew(ctx context.Context, _ store.Lease, _ time.Duration) (store.Lease, error) {
	<-ctx.Done()
	return store.Lease{}, ctx.Err()
}

// TestStepsDownBeforeExpiry: a leader that cannot renew gives up at its
// renew deadline, while its lease still stands in the database (no other
// replica could have acquired it yet), so it stops before anyone else leads.
func TestStepsDownBeforeExpiry(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	st := open(t, dsn)
	a := elector(t, stalled{st}, "a", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	la, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	err = a.Hold(ctx, la)
	took := time.Since(began)
	if !errors.Is(err, leader.ErrLost) {
		t.Fatalf("Hold = %v, want ErrLost", err)
	}
	if took > 1300*time.Millisecond {
		t.Errorf("stepped down after %s, want at the 1s renew deadline", took)
	}
	// Still a's term: another replica is refused until the TTL passes.
	var held *store.HeldError
	if _, err := open(t, dsn).Acquire(ctx, leader.LeaseName, "b http://b", time.Second); !errors.As(err, &held) {
		t.Fatalf("b's Acquire right after a stepped down = %v, want HeldError (a's lease not yet expired)", err)
	}
	if _, self := a.Current(); self {
		t.Error("a still reports itself leader after stepping down")
	}
}

// gated is a Leaser whose renewals wait while the gate is closed: a
// leader paused between two renewals.
type gated struct {
	store.Leaser
	open chan struct{} // closed: renewals go through
}

func (g gated) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return store.Lease{}, ctx.Err()
	}
	return g.Leaser.Renew(ctx, l, ttl)
}

// TestTakenOver: a leader whose lease another replica took while it was
// paused (its term ended in the database) learns it at its next renewal.
func TestTakenOver(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	st := open(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := gated{Leaser: st, open: make(chan struct{})}
	a := elector(t, g, "a", nil)
	la, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() { held <- a.Hold(ctx, la) }()
	// While a is paused, its term ends in the database and b takes the
	// lease; then a renews.
	if err := st.Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	if _, err := open(t, dsn).Acquire(ctx, leader.LeaseName, "b http://b", time.Minute); err != nil {
		t.Fatal(err)
	}
	close(g.open)
	if err := <-held; !errors.Is(err, leader.ErrLost) || !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Hold = %v, want ErrLost and ErrLeaseLost", err)
	}
	if a.Leading() {
		t.Error("a reports Leading after it learnt it was taken over")
	}
}

// TestHoldLateHasLost: the renew deadline runs from the acquisition, so a
// replica that begins holding only after it (a slow takeover, a pause) has
// lost already, and is not sure it leads from that moment on.
func TestHoldLateHasLost(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := elector(t, open(t, dsn), "a", nil)
	la, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Leading() {
		t.Fatal("a is not sure it leads right after acquiring the lease")
	}
	time.Sleep(1100 * time.Millisecond) // past the 1s renew deadline, inside the 1.5s TTL; bounded
	if a.Leading() {
		t.Error("a is sure it leads past its renew deadline without a renewal")
	}
	began := time.Now()
	if err := a.Hold(ctx, la); !errors.Is(err, leader.ErrLost) {
		t.Fatalf("Hold begun past the renew deadline = %v, want ErrLost", err)
	}
	if took := time.Since(began); took > 100*time.Millisecond {
		t.Errorf("Hold took %s to give up, want at once", took)
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []leader.Config{
		{ID: ""},
		{ID: "a b"},
		{ID: "a", TTL: time.Second, RenewDeadline: 2 * time.Second},
	} {
		if _, err := leader.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// slow is a Leaser whose renewals land after a delay: a loaded database,
// or a leader starved of CPU, answering late but answering.
type slow struct {
	store.Leaser
	delay time.Duration
}

func (s slow) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return store.Lease{}, ctx.Err()
	}
	return s.Leaser.Renew(ctx, l, ttl)
}

// TestDefaultTimingRidesOutSlowRenewals: with the default lease timing a
// leader whose every renewal takes 1.6 s to land keeps leading (a renewal
// begun an interval after the last good one must land before the renew
// deadline: 1.5 s and 3 s left it 1.5 s, and such a leader stepped down).
func TestDefaultTimingRidesOutSlowRenewals(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	e, err := leader.New(leader.Config{Leaser: slow{open(t, dsn), 1600 * time.Millisecond}, ID: "a", URL: "http://a:7777"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holdCtx, stop := context.WithTimeout(ctx, 2*leader.DefaultTTL)
	defer stop()
	if err := e.Hold(holdCtx, l); err != nil {
		t.Fatalf("a leader whose renewals take 1.6 s: Hold = %v, want it leading for %s", err, 2*leader.DefaultTTL)
	}
}
