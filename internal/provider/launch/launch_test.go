package launch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

var t0 = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

// fakeProvider answers each Launch from errs in turn (then success), and,
// when hold is set, blocks each call until it is released or its ctx ends.
// It records the most launches it saw at once, overall and per region.
type fakeProvider struct {
	hold chan struct{}

	mu        sync.Mutex
	errs      []error
	calls     int
	running   map[string]int
	most      int
	mostByReg map[string]int
	live      int
}

func (f *fakeProvider) Name() string                                      { return "fake" }
func (f *fakeProvider) Offers(context.Context) ([]model.Offer, error)     { return nil, nil }
func (f *fakeProvider) Terminate(context.Context, string) error           { return nil }
func (f *fakeProvider) List(context.Context) ([]provider.Instance, error) { return nil, nil }

func (f *fakeProvider) Launch(ctx context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	f.mu.Lock()
	f.calls++
	var err error
	if len(f.errs) > 0 {
		err, f.errs = f.errs[0], f.errs[1:]
	}
	if f.running == nil {
		f.running, f.mostByReg = map[string]int{}, map[string]int{}
	}
	r := req.Offer.Region
	f.running[r]++
	f.live++
	f.most = max(f.most, f.live)
	f.mostByReg[r] = max(f.mostByReg[r], f.running[r])
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running[r]--
		f.live--
		f.mu.Unlock()
	}()
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-ctx.Done():
			return provider.Instance{}, ctx.Err()
		}
	}
	if err != nil {
		return provider.Instance{}, err
	}
	return provider.Instance{ID: "i-" + req.Token, Offer: req.Offer, State: provider.StatePending}, nil
}

type outcome struct {
	in  provider.Instance
	err error
}

func submit(q *Queue, p provider.Provider, token, region string) chan outcome {
	ch := make(chan outcome, 1)
	q.Submit(context.Background(), Request{Provider: p, Launch: provider.LaunchRequest{Token: token, Offer: model.Offer{Provider: "aws", Region: region}},
		Done: func(in provider.Instance, err error) { ch <- outcome{in, err} }})
	return ch
}

// waitFor polls cond with a deadline (the launches run on goroutines).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBoundedConcurrency: at most PerProvider launches run at once per
// driver and PerRegion per region; the others wait their turn and all
// finish.
func TestBoundedConcurrency(t *testing.T) {
	t.Parallel()
	f := &fakeProvider{hold: make(chan struct{})}
	q := New(Options{Clock: clock.NewFake(t0), PerProvider: 3, PerRegion: 2})
	var outs []chan outcome
	for i, r := range []string{"r1", "r1", "r1", "r1", "r2", "r2", "r3", "r3"} {
		outs = append(outs, submit(q, f, string(rune('a'+i)), r))
	}
	waitFor(t, "three launches running", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.live == 3 })
	if got := q.InFlight(); got != 8 {
		t.Errorf("in flight = %d, want 8", got)
	}
	close(f.hold)
	for _, ch := range outs {
		if o := <-ch; o.err != nil {
			t.Errorf("launch: %v", o.err)
		}
	}
	q.Wait()
	if f.most != 3 {
		t.Errorf("most at once = %d, want the provider bound 3", f.most)
	}
	for r, n := range f.mostByReg {
		if n > 2 {
			t.Errorf("region %s ran %d at once, bound 2", r, n)
		}
	}
	if got := q.InFlight(); got != 0 {
		t.Errorf("in flight after all done = %d", got)
	}
}

// TestErrorKinds: a transient error is retried after a doubling back-off
// (on the fake clock) until it succeeds; insufficient capacity and quota
// are returned at once, for the caller to mark unavailable; a launch that
// outlives its deadline ends with ErrDeadline.
func TestErrorKinds(t *testing.T) {
	t.Parallel()
	ice := &provider.InsufficientCapacityError{Offer: model.Offer{Provider: "aws", Region: "r1"}}
	quota := &provider.QuotaError{Quota: "aws H100 GPUs", Limit: 8, Used: 8, Requested: 8}
	transient := errors.Join(errors.New("RequestLimitExceeded"), provider.ErrTransient)
	type result struct {
		Calls    int
		OK       bool
		ICE      bool
		Quota    bool
		Deadline bool
	}
	tests := map[string]struct {
		errs    []error
		hold    bool
		advance []time.Duration // fake time moved once a timer is armed
		want    result
	}{
		"transient twice, then an instance": {errs: []error{transient, transient}, advance: []time.Duration{time.Second, 2 * time.Second},
			want: result{Calls: 3, OK: true}},
		"insufficient capacity: no retry": {errs: []error{ice}, want: result{Calls: 1, ICE: true}},
		"quota: no retry":                 {errs: []error{quota}, want: result{Calls: 1, Quota: true}},
		"transient until the deadline": {errs: []error{transient, transient, transient, transient, transient, transient, transient, transient},
			advance: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 3 * time.Second}, want: result{Calls: 4, Deadline: true}},
		"a hung call ends at the deadline": {hold: true, advance: []time.Duration{10 * time.Second}, want: result{Calls: 1, Deadline: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			f := &fakeProvider{errs: tc.errs}
			if tc.hold {
				f.hold = make(chan struct{})
			}
			q := New(Options{Clock: clk, Deadline: 10 * time.Second, Backoff: time.Second})
			ch := submit(q, f, "a", "r1")
			for _, d := range tc.advance {
				// The deadline's timer, plus a back-off's or nothing.
				waitFor(t, "the launch to wait", func() bool {
					f.mu.Lock()
					defer f.mu.Unlock()
					return clk.Waiters() == 2 || tc.hold && f.calls == 1 && clk.Waiters() == 1
				})
				clk.Advance(d)
			}
			o := <-ch
			got := result{Calls: f.calls, OK: o.err == nil && o.in.ID == "i-a", ICE: provider.IsInsufficientCapacity(o.err),
				Quota: provider.IsQuotaExceeded(o.err), Deadline: errors.Is(o.err, ErrDeadline)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("outcome (-want +got):\n%s\nerr: %v", diff, o.err)
			}
		})
	}
}

// TestSubmissionOrder: with bounds of 1 launches run one at a time in the
// order submitted, each outcome recorded (Done) before the next starts, so
// a simulation on a fake clock is deterministic.
func TestSubmissionOrder(t *testing.T) {
	t.Parallel()
	f := &fakeProvider{}
	q := New(Options{Clock: clock.NewFake(t0), PerProvider: 1, PerRegion: 1})
	var mu sync.Mutex
	var log []string
	for _, tok := range []string{"a", "b", "c", "d", "e"} {
		q.Submit(context.Background(), Request{Provider: f, Launch: provider.LaunchRequest{Token: tok, Offer: model.Offer{Region: "r1"}},
			Done: func(in provider.Instance, err error) {
				mu.Lock()
				defer mu.Unlock()
				f.mu.Lock()
				defer f.mu.Unlock()
				log = append(log, in.ID, fmt.Sprint(f.calls))
			}})
	}
	q.Wait()
	want := []string{"i-a", "1", "i-b", "2", "i-c", "3", "i-d", "4", "i-e", "5"}
	if diff := cmp.Diff(want, log); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}
