// Package providertest is the conformance suite of the provider seam
// (DESIGN.md §4). Every driver runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		providertest.Run(t, p, providertest.Options{...})
//	}
//
// Run exercises the parts of the contract the driver declares: a driver
// that launches gets idempotency, exact inventory and typed-error checks; a
// fixed-capacity driver proves that its offers and inventory are its
// machines; optional capabilities (InterruptionWatcher, Interrupter, Biller)
// are checked when the driver implements them.
//
// The suite shares one provider across its subtests and runs them in order,
// since Advance moves a clock they all see. Each subtest compares inventory
// against what it found before it started, so instances other subtests
// leave behind do not matter, and it terminates what it launched.
package providertest

import (
	"context"
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

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Options say which parts of the contract to exercise and how. The zero
// value tests a launching driver on real time, without capacity or quota
// checks.
type Options struct {
	// Fixed declares a fixed-capacity driver and the machines it must
	// describe. When nil and the driver implements provider.FixedCapacity,
	// its Machines are used.
	Fixed *Fixed
	// Offer is the offer launch checks use; nil means the first on-demand
	// offer, or the first offer when none is on-demand. Pick one with room
	// for a handful of instances and, on a simulator, no interruptions.
	Offer *model.Offer
	// Capacity, when set, names an offer with exactly N instances free:
	// N launches succeed, the next fails with *InsufficientCapacityError
	// carrying the offer, and a launch succeeds again after one of the N is
	// terminated.
	Capacity *Limit
	// Quota, when set, names an offer whose quota allows exactly N more
	// launches: the next fails with an error matching ErrQuotaExceeded.
	Quota *Limit
	// Advance moves the driver's (fake) clock forward. Nil means the driver
	// runs on real time: checks that wait for boots or notices are skipped.
	Advance func(time.Duration)
	// Boot is how far Advance must move for a new instance to be running;
	// zero skips the boot check.
	Boot time.Duration
}

// Fixed is what a fixed-capacity driver declares.
type Fixed struct {
	Machines []model.Node
}

// Limit names an offer and how many launches it has room for.
type Limit struct {
	Offer model.Offer
	N     int
}

// Run runs the conformance suite against p.
func Run(t *testing.T, p provider.Provider, opts Options) {
	t.Helper()
	ctx := context.Background()
	if opts.Fixed == nil {
		if fc, ok := p.(provider.FixedCapacity); ok {
			machines, err := fc.Machines(ctx)
			if err != nil {
				t.Fatalf("Machines: %v", err)
			}
			opts.Fixed = &Fixed{Machines: machines}
		}
	}
	s := &suite{p: p, opts: opts}
	t.Run("offers valid", s.offersValid)
	if opts.Fixed != nil {
		t.Run("fixed refuses launch and terminate", s.fixedRefuses)
		t.Run("fixed inventory is the machines", s.fixedInventory)
		t.Run("fixed offers are the machines", s.fixedOffers)
		return
	}
	t.Run("launch idempotent per token", s.launchIdempotent)
	t.Run("launch concurrent same token", s.launchConcurrent)
	t.Run("list exact after launch and terminate", s.listExact)
	t.Run("terminate idempotent and gone is success", s.terminateIdempotent)
	t.Run("launch unknown offer", s.launchUnknownOffer)
	t.Run("launch honours context", s.launchContext)
	if opts.Advance != nil && opts.Boot > 0 {
		t.Run("launch boots to running", s.boots)
	}
	if opts.Capacity != nil {
		t.Run("insufficient capacity typed", s.capacity)
	}
	if opts.Quota != nil {
		t.Run("quota exceeded typed", s.quota)
	}
	_, watches := p.(provider.InterruptionWatcher)
	_, interrupts := p.(provider.Interrupter)
	if watches && interrupts && opts.Advance != nil {
		t.Run("interrupt notice then gone", s.interrupt)
	}
	if _, ok := p.(provider.Biller); ok {
		t.Run("usage covers instances", s.usage)
	}
}

type suite struct {
	p    provider.Provider
	opts Options
}

var ctx = context.Background()

func (s *suite) offers(t *testing.T) []model.Offer {
	t.Helper()
	offers, err := s.p.Offers(ctx)
	if err != nil {
		t.Fatalf("Offers: %v", err)
	}
	return offers
}

func (s *suite) list(t *testing.T) []provider.Instance {
	t.Helper()
	inv, err := s.p.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return inv
}

// ids returns the sorted instance ids of inv, failing on duplicates.
func ids(t *testing.T, inv []provider.Instance) []string {
	t.Helper()
	out := make([]string, 0, len(inv))
	for _, in := range inv {
		out = append(out, in.ID)
	}
	slices.Sort(out)
	for i := 1; i < len(out); i++ {
		if out[i] == out[i-1] {
			t.Errorf("List returned instance %s twice", out[i])
		}
	}
	return out
}

// launchOffer is the offer launch checks use.
func (s *suite) launchOffer(t *testing.T) model.Offer {
	t.Helper()
	if s.opts.Offer != nil {
		return *s.opts.Offer
	}
	offers := s.offers(t)
	if len(offers) == 0 {
		t.Skip("the driver offers nothing to launch")
	}
	if i := slices.IndexFunc(offers, func(o model.Offer) bool { return o.CapacityType == model.OnDemand }); i >= 0 {
		return offers[i]
	}
	return offers[0]
}

func token(t *testing.T, n int) string { return fmt.Sprintf("providertest/%s/%d", t.Name(), n) }

func (s *suite) launch(t *testing.T, o model.Offer, tok string) provider.Instance {
	t.Helper()
	in, err := s.p.Launch(ctx, provider.LaunchRequest{Offer: o, Token: tok, Labels: map[string]string{"providertest": "yes"}})
	if err != nil {
		t.Fatalf("Launch(%s, token %q): %v", o.InstanceType, tok, err)
	}
	if in.ID == "" {
		t.Fatalf("Launch returned an instance without an ID: %+v", in)
	}
	return in
}

func (s *suite) terminate(t *testing.T, id string) {
	t.Helper()
	if err := s.p.Terminate(ctx, id); err != nil {
		t.Fatalf("Terminate(%s): %v", id, err)
	}
}

// sameOffer reports whether two offers name the same capacity; prices and
// rates may be refreshed between calls.
func sameOffer(a, b model.Offer) bool {
	return a.Provider == b.Provider && a.Region == b.Region && a.Zone == b.Zone && a.InstanceType == b.InstanceType &&
		a.GPU == b.GPU && a.GPUCount == b.GPUCount && a.GPUMemory == b.GPUMemory && a.CapacityType == b.CapacityType
}

func (s *suite) offersValid(t *testing.T) {
	offers := s.offers(t)
	seen := map[model.Offer]bool{}
	for i, o := range offers {
		var problems []string
		bad := func(msg string) { problems = append(problems, msg) }
		if o.Provider == "" || o.Region == "" || o.InstanceType == "" {
			bad("provider, region and instance type must be set")
		}
		if o.GPU == "" || o.GPUCount < 1 {
			bad("an offer sells at least one named GPU")
		}
		if o.GPUMemory < 0 || o.Memory < 0 || o.VCPUs < 0 || math.IsNaN(o.VCPUs) {
			bad("GPU memory, memory and vCPUs must not be negative")
		}
		switch o.CapacityType {
		case model.OnDemand, model.Spot, model.Reserved:
			if !(o.PricePerHour > 0) || math.IsInf(o.PricePerHour, 0) {
				bad("price per hour must be positive and finite")
			}
		case model.Owned:
			if !(o.PricePerHour >= 0) || math.IsInf(o.PricePerHour, 0) {
				bad("owned price per hour must be >= 0 and finite")
			}
		default:
			bad(fmt.Sprintf("unknown capacity type %q", o.CapacityType))
		}
		switch {
		case !(o.InterruptionRate >= 0) || math.IsInf(o.InterruptionRate, 0):
			bad("interruption rate must be >= 0 and finite")
		case o.CapacityType != model.Spot && o.InterruptionRate != 0:
			bad("only spot offers have an interruption rate")
		}
		if seen[o] {
			bad("listed twice")
		}
		seen[o] = true
		if len(problems) > 0 {
			t.Errorf("offer %d %+v: %v", i, o, problems)
		}
	}
	// The slice is the caller's: changing it must not change the driver.
	if len(offers) > 0 {
		want := offers[0]
		offers[0].PricePerHour = -1
		if again := s.offers(t); len(again) == 0 || again[0] != want {
			t.Errorf("Offers returned a slice shared with the driver")
		}
	}
}

func (s *suite) launchIdempotent(t *testing.T) {
	o := s.launchOffer(t)
	tok := token(t, 0)
	first := s.launch(t, o, tok)
	t.Cleanup(func() { _ = s.p.Terminate(ctx, first.ID) })
	if !sameOffer(o, first.Offer) {
		t.Errorf("instance offer = %+v, want %+v", first.Offer, o)
	}
	if first.LaunchedAt.IsZero() {
		t.Errorf("instance %s has no LaunchedAt", first.ID)
	}
	if first.Labels["providertest"] != "yes" {
		t.Errorf("instance labels = %v, want the request's labels", first.Labels)
	}
	again := s.launch(t, o, tok)
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("relaunch with the same token (-first +again):\n%s", diff)
	}
	other := s.launch(t, o, token(t, 1))
	t.Cleanup(func() { _ = s.p.Terminate(ctx, other.ID) })
	if other.ID == first.ID {
		t.Errorf("a new token returned the old instance %s", first.ID)
	}
}

func (s *suite) launchConcurrent(t *testing.T) {
	o := s.launchOffer(t)
	before := ids(t, s.list(t))
	tok := token(t, 0)
	const n = 8
	var wg sync.WaitGroup
	got := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, err := s.p.Launch(ctx, provider.LaunchRequest{Offer: o, Token: tok})
			got[i], errs[i] = in.ID, err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Launch %d: %v", i, err)
		}
	}
	t.Cleanup(func() { _ = s.p.Terminate(ctx, got[0]) })
	for i := range got {
		if got[i] != got[0] {
			t.Fatalf("concurrent launches with one token returned %v; want one instance", got)
		}
	}
	want := append(slices.Clone(before), got[0])
	slices.Sort(want)
	if diff := cmp.Diff(want, ids(t, s.list(t))); diff != "" {
		t.Errorf("List after concurrent launches (-want +got):\n%s", diff)
	}
}

func (s *suite) listExact(t *testing.T) {
	o := s.launchOffer(t)
	before := ids(t, s.list(t))
	a := s.launch(t, o, token(t, 0))
	b := s.launch(t, o, token(t, 1))
	want := append(slices.Clone(before), a.ID, b.ID)
	slices.Sort(want)
	inv := s.list(t)
	if diff := cmp.Diff(want, ids(t, inv)); diff != "" {
		t.Errorf("List after two launches (-want +got):\n%s", diff)
	}
	for _, in := range inv {
		if in.ID == a.ID && !sameOffer(in.Offer, o) {
			t.Errorf("listed offer of %s = %+v, want %+v", in.ID, in.Offer, o)
		}
		if in.State == provider.StateTerminated {
			t.Errorf("List returned terminated instance %s", in.ID)
		}
	}
	s.terminate(t, a.ID)
	want = append(slices.Clone(before), b.ID)
	slices.Sort(want)
	if diff := cmp.Diff(want, ids(t, s.list(t))); diff != "" {
		t.Errorf("List after terminating one (-want +got):\n%s", diff)
	}
	s.terminate(t, b.ID)
	if diff := cmp.Diff(before, ids(t, s.list(t)), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("List after terminating both (-want +got):\n%s", diff)
	}
}

func (s *suite) terminateIdempotent(t *testing.T) {
	o := s.launchOffer(t)
	in := s.launch(t, o, token(t, 0))
	s.terminate(t, in.ID)
	s.terminate(t, in.ID)
	s.terminate(t, "providertest-never-launched")
	if slices.Contains(ids(t, s.list(t)), in.ID) {
		t.Errorf("terminated instance %s is still listed", in.ID)
	}
	// A replay of the launch must not bring it back.
	again, err := s.p.Launch(ctx, provider.LaunchRequest{Offer: o, Token: token(t, 0)})
	if err == nil && again.ID != in.ID {
		t.Errorf("replaying a terminated launch's token started %s; want %s or an error", again.ID, in.ID)
	}
	if slices.Contains(ids(t, s.list(t)), in.ID) {
		t.Errorf("replaying the launch listed terminated instance %s again", in.ID)
	}
}

func (s *suite) launchUnknownOffer(t *testing.T) {
	o := s.launchOffer(t)
	o.InstanceType = "providertest-no-such-type"
	_, err := s.p.Launch(ctx, provider.LaunchRequest{Offer: o, Token: token(t, 0)})
	if !errors.Is(err, provider.ErrUnknownOffer) {
		t.Errorf("Launch(unknown offer) error = %v, want ErrUnknownOffer", err)
	}
}

func (s *suite) launchContext(t *testing.T) {
	o := s.launchOffer(t)
	before := ids(t, s.list(t))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := s.p.Launch(cctx, provider.LaunchRequest{Offer: o, Token: token(t, 0)})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Launch(cancelled ctx) error = %v, want context.Canceled", err)
	}
	if diff := cmp.Diff(before, ids(t, s.list(t)), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("a cancelled launch changed the inventory (-want +got):\n%s", diff)
	}
}

func (s *suite) boots(t *testing.T) {
	o := s.launchOffer(t)
	in := s.launch(t, o, token(t, 0))
	t.Cleanup(func() { _ = s.p.Terminate(ctx, in.ID) })
	s.opts.Advance(s.opts.Boot)
	for _, got := range s.list(t) {
		if got.ID == in.ID {
			if got.State != provider.StateRunning {
				t.Errorf("state %s after %v = %q, want %q", in.ID, s.opts.Boot, got.State, provider.StateRunning)
			}
			return
		}
	}
	t.Errorf("instance %s not listed after boot", in.ID)
}

func (s *suite) capacity(t *testing.T) {
	lim := s.opts.Capacity
	var launched []string
	t.Cleanup(func() {
		for _, id := range launched {
			_ = s.p.Terminate(ctx, id)
		}
	})
	for i := range lim.N {
		launched = append(launched, s.launch(t, lim.Offer, token(t, i)).ID)
	}
	_, err := s.p.Launch(ctx, provider.LaunchRequest{Offer: lim.Offer, Token: token(t, lim.N)})
	var ice *provider.InsufficientCapacityError
	if !errors.As(err, &ice) {
		t.Fatalf("launch %d of %d-instance offer: error = %v, want *InsufficientCapacityError", lim.N+1, lim.N, err)
	}
	if !sameOffer(ice.Offer, lim.Offer) {
		t.Errorf("InsufficientCapacityError offer = %+v, want %+v", ice.Offer, lim.Offer)
	}
	if !provider.IsInsufficientCapacity(err) {
		t.Errorf("IsInsufficientCapacity(%v) = false", err)
	}
	if lim.N == 0 {
		return
	}
	s.terminate(t, launched[0])
	launched = append(launched, s.launch(t, lim.Offer, token(t, lim.N+1)).ID)
}

func (s *suite) quota(t *testing.T) {
	lim := s.opts.Quota
	var launched []string
	t.Cleanup(func() {
		for _, id := range launched {
			_ = s.p.Terminate(ctx, id)
		}
	})
	for i := range lim.N {
		launched = append(launched, s.launch(t, lim.Offer, token(t, i)).ID)
	}
	_, err := s.p.Launch(ctx, provider.LaunchRequest{Offer: lim.Offer, Token: token(t, lim.N)})
	if !errors.Is(err, provider.ErrQuotaExceeded) {
		t.Fatalf("launch over quota: error = %v, want ErrQuotaExceeded", err)
	}
	if provider.IsInsufficientCapacity(err) || provider.IsTransient(err) {
		t.Errorf("quota error %v also reads as another kind", err)
	}
}

func (s *suite) interrupt(t *testing.T) {
	p := s.p
	o := s.launchOffer(t)
	in := s.launch(t, o, token(t, 0))
	n, err := p.(provider.Interrupter).Interrupt(ctx, in.ID)
	if err != nil {
		t.Fatalf("Interrupt(%s): %v", in.ID, err)
	}
	if n.InstanceID != in.ID || !n.Deadline.After(n.IssuedAt) {
		t.Fatalf("notice = %+v; want one for %s with a deadline after it is issued", n, in.ID)
	}
	again, err := p.(provider.Interrupter).Interrupt(ctx, in.ID)
	if err != nil {
		t.Fatalf("second Interrupt(%s): %v", in.ID, err)
	}
	if diff := cmp.Diff(n, again); diff != "" {
		t.Errorf("second Interrupt (-first +second):\n%s", diff)
	}
	notices := func() []provider.Notice {
		got, err := p.(provider.InterruptionWatcher).Notices(ctx)
		if err != nil {
			t.Fatalf("Notices: %v", err)
		}
		return slices.DeleteFunc(got, func(x provider.Notice) bool { return x.InstanceID != in.ID })
	}
	lead := n.Deadline.Sub(n.IssuedAt)
	s.opts.Advance(lead / 2)
	if diff := cmp.Diff([]provider.Notice{n}, notices()); diff != "" {
		t.Errorf("Notices before the deadline (-want +got):\n%s", diff)
	}
	if !slices.Contains(ids(t, s.list(t)), in.ID) {
		t.Errorf("instance %s gone before its deadline", in.ID)
	}
	s.opts.Advance(lead - lead/2)
	if slices.Contains(ids(t, s.list(t)), in.ID) {
		t.Errorf("instance %s still listed at its deadline", in.ID)
	}
	if got := notices(); len(got) != 0 {
		t.Errorf("Notices after the stop = %+v, want none for %s", got, in.ID)
	}
	if _, err := p.(provider.Interrupter).Interrupt(ctx, in.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Interrupt(gone) error = %v, want ErrNotFound", err)
	}
	s.terminate(t, in.ID)
}

func (s *suite) usage(t *testing.T) {
	b := s.p.(provider.Biller)
	o := s.launchOffer(t)
	in := s.launch(t, o, token(t, 0))
	find := func() provider.Usage {
		t.Helper()
		all, err := b.Usage(ctx)
		if err != nil {
			t.Fatalf("Usage: %v", err)
		}
		if !slices.IsSortedFunc(all, func(x, y provider.Usage) int {
			if c := x.Start.Compare(y.Start); c != 0 {
				return c
			}
			return strings.Compare(x.InstanceID, y.InstanceID)
		}) {
			t.Errorf("Usage is not ordered by start then instance id")
		}
		for _, u := range all {
			if u.InstanceID == in.ID {
				return u
			}
		}
		t.Fatalf("Usage has no record for %s", in.ID)
		return provider.Usage{}
	}
	if s.opts.Advance != nil {
		s.opts.Advance(90 * time.Second)
	}
	u := find()
	if !u.Running || u.MicroUSD < 0 || u.Seconds < 0 || u.End.Before(u.Start) {
		t.Errorf("usage of a running instance = %+v", u)
	}
	if s.opts.Advance != nil && (u.Seconds < 90 || (o.PricePerHour > 0 && u.MicroUSD == 0)) {
		t.Errorf("usage after 90s = %+v; want at least 90 billed seconds", u)
	}
	s.terminate(t, in.ID)
	stopped := find()
	if stopped.Running {
		t.Errorf("usage of a terminated instance says running: %+v", stopped)
	}
	if s.opts.Advance != nil {
		s.opts.Advance(time.Hour)
		if diff := cmp.Diff(stopped, find()); diff != "" {
			t.Errorf("usage kept growing after terminate (-at stop +an hour later):\n%s", diff)
		}
	}
}

func (s *suite) fixedRefuses(t *testing.T) {
	offers := s.offers(t)
	var o model.Offer
	if len(offers) > 0 {
		o = offers[0]
	}
	if _, err := s.p.Launch(ctx, provider.LaunchRequest{Offer: o, Token: token(t, 0)}); !errors.Is(err, provider.ErrFixedCapacity) {
		t.Errorf("Launch error = %v, want ErrFixedCapacity", err)
	}
	for _, m := range s.opts.Fixed.Machines {
		if err := s.p.Terminate(ctx, m.ID); !errors.Is(err, provider.ErrFixedCapacity) {
			t.Errorf("Terminate(%s) error = %v, want ErrFixedCapacity", m.ID, err)
		}
	}
}

// machineFacts is what an instance's offer must say about its machine.
type machineFacts struct {
	ID           string
	GPU          string
	GPUCount     int
	GPUMemory    model.Bytes
	VCPUs        float64
	Memory       model.Bytes
	CapacityType model.CapacityType
	Region       string
}

func factsOfMachine(m model.Node) machineFacts {
	f := machineFacts{ID: m.ID, GPUCount: len(m.GPUs), VCPUs: m.CPU, Memory: m.Memory, CapacityType: m.CapacityType, Region: m.Region}
	if f.CapacityType == "" {
		f.CapacityType = model.Owned
	}
	if len(m.GPUs) > 0 {
		f.GPU, f.GPUMemory = m.GPUs[0].Model, m.GPUs[0].Memory
	}
	return f
}

func factsOfInstance(in provider.Instance, region bool) machineFacts {
	o := in.Offer
	f := machineFacts{ID: in.ID, GPU: o.GPU, GPUCount: o.GPUCount, GPUMemory: o.GPUMemory, VCPUs: o.VCPUs, Memory: o.Memory, CapacityType: o.CapacityType}
	if region {
		f.Region = o.Region
	}
	return f
}

func (s *suite) fixedInventory(t *testing.T) {
	machines := s.opts.Fixed.Machines
	byID := map[string]provider.Instance{}
	for _, in := range s.list(t) {
		byID[in.ID] = in
	}
	var want, got []machineFacts
	for _, m := range machines {
		want = append(want, factsOfMachine(m))
		if in, ok := byID[m.ID]; ok {
			got = append(got, factsOfInstance(in, m.Region != ""))
			delete(byID, m.ID)
		}
	}
	for _, in := range byID {
		got = append(got, factsOfInstance(in, true))
	}
	sortFacts := cmpopts.SortSlices(func(a, b machineFacts) bool { return a.ID < b.ID })
	if diff := cmp.Diff(want, got, sortFacts, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("inventory against the declared machines (-machines +List):\n%s", diff)
	}
}

func (s *suite) fixedOffers(t *testing.T) {
	var want []model.Offer
	for _, in := range s.list(t) {
		if in.Offer.GPUCount > 0 && !slices.Contains(want, in.Offer) {
			want = append(want, in.Offer)
		}
	}
	sortOffers := cmpopts.SortSlices(func(a, b model.Offer) bool { return fmt.Sprint(a) < fmt.Sprint(b) })
	if diff := cmp.Diff(want, s.offers(t), sortOffers, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("offers against the machines' offers (-machines +Offers):\n%s", diff)
	}
}
