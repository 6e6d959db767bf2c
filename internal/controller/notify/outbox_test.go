package notify

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/store"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// receiver is a real HTTP webhook receiver that checks signatures and
// fails the first fails posts of each id.
type receiver struct {
	t      *testing.T
	secret []byte
	fails  int

	mu    sync.Mutex
	tries map[string]int
	got   map[string]int // accepted, by id
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := r.Header.Get(HeaderNotificationID)
	if !Verify(rc.secret, body, r.Header.Get(HeaderSignature)) {
		rc.t.Errorf("bad signature on %s", id)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.tries[id]++
	if rc.tries[id] <= rc.fails {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	rc.got[id]++
}

// commits records every batch the outbox commits, in order.
type commits struct {
	mu      sync.Mutex
	batches []*store.Batch
	err     error
}

func (c *commits) Commit(_ context.Context, build func() *store.Batch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches = append(c.batches, build())
	return c.err
}

func newOutbox(t *testing.T, fails int, loaded ...*store.Notification) (*Outbox, *receiver, *commits, *clock.Fake) {
	t.Helper()
	rc := &receiver{t: t, secret: []byte("k3y"), fails: fails, tries: map[string]int{}, got: map[string]int{}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	clk := clock.NewFake(t0)
	cm := &commits{}
	o := New(Config{Clock: clk, HTTP: srv.Client(), Committer: cm,
		Receiver: func(*store.Notification) (string, []byte, error) { return srv.URL, rc.secret, nil }}, loaded)
	return o, rc, cm, clk
}

func note(id string) *store.Notification {
	return &store.Notification{ID: id, Kind: KindAlert, Body: []byte(`{"id":"` + id + `"}`), NextAt: t0, Created: t0}
}

func TestQueueIsDurableWithTheCallersBatch(t *testing.T) {
	t.Parallel()
	o, _, _, _ := newOutbox(t, 0)
	b := &store.Batch{}
	if !o.Queue(note("a"), b) {
		t.Fatal("a first notification was not queued")
	}
	if o.Queue(note("a"), b) {
		t.Error("the same id was queued twice")
	}
	if len(b.Notifications) != 1 || b.Notifications[0].ID != "a" {
		t.Errorf("batch holds %v, want notification a once", b.Notifications)
	}
	select {
	case <-o.Kicked():
	default:
		t.Error("queueing did not wake the delivery loop")
	}
}

func TestDeliverRetriesThenTombstones(t *testing.T) {
	t.Parallel()
	o, rc, cm, clk := newOutbox(t, 1, note("loaded"))
	o.Queue(note("queued"), &store.Batch{})
	o.DeliverDue(t.Context()) // both fail once
	next, ok := o.Next()
	if !ok || !next.Equal(t0.Add(Backoff(1))) {
		t.Fatalf("next delivery %v %v, want after a backoff of %s", next, ok, Backoff(1))
	}
	o.DeliverDue(t.Context()) // not due yet: nothing is posted
	clk.Advance(time.Second)
	o.DeliverDue(t.Context())
	if diff := cmp.Diff(map[string]int{"loaded": 1, "queued": 1}, rc.got); diff != "" {
		t.Errorf("accepted deliveries (-want +got):\n%s", diff)
	}
	if o.Len() != 0 {
		t.Errorf("%d notifications still wait", o.Len())
	}
	// Every outcome was committed, in delivery order: two retries, then
	// two tombstones.
	var got []string
	for _, b := range cm.batches {
		for _, n := range b.Notifications {
			state := "retry"
			if n.Delivered {
				state = "delivered"
			}
			got = append(got, n.ID+" "+state)
		}
	}
	want := []string{"loaded retry", "queued retry", "loaded delivered", "queued delivered"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("committed outcomes (-want +got):\n%s", diff)
	}
}

func TestGivesUpAfterADayAndTheLeastTries(t *testing.T) {
	t.Parallel()
	o, rc, _, clk := newOutbox(t, 1<<30)
	o.Queue(note("doomed"), &store.Batch{})
	for range MinTries + 20 {
		o.DeliverDue(t.Context())
		clk.Advance(2 * time.Hour)
		if o.Len() == 0 {
			break
		}
	}
	if o.Len() != 0 {
		t.Fatal("a failing notification was never given up")
	}
	if tries := rc.tries["doomed"]; tries < MinTries {
		t.Errorf("given up after %d tries, want at least %d", tries, MinTries)
	}
}

func TestAFailedCommitStopsDelivery(t *testing.T) {
	t.Parallel()
	o, rc, cm, _ := newOutbox(t, 0, note("a"), note("b"))
	cm.err = errors.New("disk gone")
	o.DeliverDue(t.Context())
	if n := rc.got["a"] + rc.got["b"]; n != 1 {
		t.Errorf("%d posts after a failed commit, want the one before it", n)
	}
}

func TestReceiverErrorsAreRetried(t *testing.T) {
	t.Parallel()
	o, _, _, _ := newOutbox(t, 0)
	o.cfg.Receiver = func(*store.Notification) (string, []byte, error) {
		return "", nil, errors.New("no receiver is configured")
	}
	o.Queue(note("x"), &store.Batch{})
	o.DeliverDue(t.Context())
	n, ok := o.Waiting("x")
	if !ok || n.Attempts != 1 || n.LastError != "no receiver is configured" {
		t.Errorf("after a receiver error: %+v %v", n, ok)
	}
}
