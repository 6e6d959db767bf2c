package sim

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

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/providertest"
)

var (
	ctx     = context.Background()
	t0      = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	loadCat = sync.OnceValues(catalog.Load)
)

func cat(t testing.TB) *catalog.Catalog {
	t.Helper()
	c, err := loadCat()
	if err != nil {
		t.Fatalf("catalog.Load: %v", err)
	}
	return c
}

// findOffer returns the first catalog offer keep accepts.
func findOffer(t testing.TB, keep func(model.Offer) bool) model.Offer {
	t.Helper()
	i := slices.IndexFunc(cat(t).Offers(), keep)
	if i < 0 {
		t.Fatal("no catalog offer matches")
	}
	return cat(t).Offers()[i]
}

func offerOf(cloud string, ct model.CapacityType, gpus int) func(model.Offer) bool {
	return func(o model.Offer) bool {
		return o.Provider == cloud && o.CapacityType == ct && (gpus == 0 || o.GPUCount == gpus)
	}
}

// exact returns a rule match selecting exactly o.
func exact(o model.Offer) Match {
	return Match{Cloud: o.Provider, Region: o.Region, Zone: o.Zone, InstanceType: o.InstanceType, GPU: o.GPU, CapacityType: o.CapacityType}
}

func ptr[T any](v T) *T { return &v }

func newSim(t testing.TB, cfg Config) (*Provider, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(t0)
	cfg.Clock = clk
	if cfg.Offers == nil {
		cfg.Catalog = cat(t)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p, clk
}

func launch(t testing.TB, p *Provider, o model.Offer, tok string) provider.Instance {
	t.Helper()
	in, err := p.Launch(ctx, provider.LaunchRequest{Offer: o, Token: tok})
	if err != nil {
		t.Fatalf("Launch(%s): %v", o.InstanceType, err)
	}
	return in
}

func TestConformance(t *testing.T) {
	od := findOffer(t, offerOf("aws", model.OnDemand, 1))
	scarce := findOffer(t, offerOf("gcp", model.OnDemand, 1))
	quoted := findOffer(t, offerOf("lambda", model.OnDemand, 8))
	p, clk := newSim(t, Config{Seed: 1, Scenario: &Scenario{
		Clouds: map[string]CloudSpec{"lambda": {Quota: map[string]int{"*": 16}}},
		Offers: []OfferRule{{Match: exact(scarce), Capacity: ptr(3)}},
	}})
	providertest.Run(t, p, providertest.Options{
		Offer:    &od,
		Capacity: &providertest.Limit{Offer: scarce, N: 3},
		Quota:    &providertest.Limit{Offer: quoted, N: 2},
		Advance:  clk.Advance,
		Boot:     150 * time.Second,
	})
}

func TestConformanceSmallOfferSet(t *testing.T) {
	offers := []model.Offer{
		{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, CapacityType: model.OnDemand, PricePerHour: 98.32},
		{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, CapacityType: model.Spot, PricePerHour: 40, InterruptionRate: 0.01},
	}
	p, clk := newSim(t, Config{Offers: offers, Seed: 7, TimeScale: 10, Scenario: &Scenario{
		Clouds: map[string]CloudSpec{"aws": {Quota: map[string]int{"H100": 8 * 6}}},
		Offers: []OfferRule{{Match: Match{Cloud: "aws"}, Capacity: ptr(10)}, {Match: exact(offers[0]), Capacity: ptr(5)}},
	}})
	providertest.Run(t, p, providertest.Options{
		Offer:    &offers[0],
		Capacity: &providertest.Limit{Offer: offers[0], N: 5}, // the 6th is within quota
		Quota:    &providertest.Limit{Offer: offers[1], N: 6}, // 6 × 8 GPUs of spot quota, capacity 10
		Advance:  clk.Advance,
		Boot:     15 * time.Second,
	})
}

// script drives a simulator through launches, time, interrupts and
// terminations, and returns what it recorded.
func script(t *testing.T, seed int64) ([]Event, []provider.Usage) {
	t.Helper()
	spot := findOffer(t, offerOf("aws", model.Spot, 1))
	od := findOffer(t, offerOf("azure", model.OnDemand, 0))
	p, clk := newSim(t, Config{Seed: seed, Scenario: &Scenario{Offers: []OfferRule{
		{Match: exact(spot), Capacity: ptr(100), InterruptionRate: ptr(2.0)},
		{Match: exact(od), Capacity: ptr(100)},
	}}})
	var ids []string
	for i := range 30 {
		o := spot
		if i%3 == 0 {
			o = od
		}
		ids = append(ids, launch(t, p, o, fmt.Sprint("tok-", i)).ID)
		clk.Advance(time.Minute)
	}
	if _, err := p.Interrupt(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	for range 18 {
		clk.Advance(10 * time.Minute)
		if err := p.Terminate(ctx, ids[len(ids)-1]); err != nil {
			t.Fatal(err)
		}
		ids = ids[:len(ids)-1]
	}
	u, err := p.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return p.Events(), u
}

func TestDeterministicForSeedAndClock(t *testing.T) {
	events, usage := script(t, 42)
	again, usageAgain := script(t, 42)
	if diff := cmp.Diff(events, again); diff != "" {
		t.Errorf("events of two equal runs (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(usage, usageAgain); diff != "" {
		t.Errorf("usage of two equal runs (-first +second):\n%s", diff)
	}
	kinds := map[EventKind]int{}
	for _, e := range events {
		kinds[e.Kind]++
	}
	for _, k := range []EventKind{EventLaunched, EventRunning, EventNotice, EventInterrupted, EventTerminated} {
		if kinds[k] == 0 {
			t.Errorf("the script produced no %s event; it should exercise every kind (got %v)", k, kinds)
		}
	}
	if !slices.IsSortedFunc(events, func(a, b Event) int { return a.At.Compare(b.At) }) {
		t.Errorf("events are not in time order")
	}
	other, _ := script(t, 43)
	if cmp.Equal(events, other) {
		t.Errorf("seeds 42 and 43 gave the same events")
	}
}

// TestInterruptionRate launches many spot instances at once, runs them for
// a horizon and compares notices per instance-hour of exposure with the
// configured rate. Notices are Poisson, so the tolerance is four standard
// deviations of the expected count; the seed is fixed, so the test is too.
func TestInterruptionRate(t *testing.T) {
	catalogSpot := findOffer(t, func(o model.Offer) bool {
		return o.Provider == "aws" && o.CapacityType == model.Spot && o.GPUCount == 1 && o.InterruptionRate > 0.0003
	})
	for name, tc := range map[string]struct {
		offer    model.Offer
		rate     *float64 // scenario override
		want     float64
		n        int
		horizon  time.Duration
		cloudKey string
	}{
		"scenario rate 0.5 per hour": {offer: catalogSpot, rate: ptr(0.5), want: 0.5, n: 4000, horizon: 2 * time.Hour},
		"catalog spot advisor rate":  {offer: catalogSpot, want: catalogSpot.InterruptionRate, n: 4000, horizon: 60 * 24 * time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, clk := newSim(t, Config{Seed: 9, Scenario: &Scenario{
				Clouds: map[string]CloudSpec{tc.offer.Provider: {Quota: map[string]int{"*": 1 << 30}}},
				Offers: []OfferRule{{Match: exact(tc.offer), Capacity: ptr(tc.n), InterruptionRate: tc.rate}},
			}})
			for i := range tc.n {
				launch(t, p, tc.offer, fmt.Sprint(i))
			}
			clk.Advance(tc.horizon)
			exposure, notices := time.Duration(0), 0
			noticed := map[string]time.Time{}
			for _, e := range p.Events() {
				if e.Kind == EventNotice {
					noticed[e.InstanceID] = e.At
				}
			}
			for _, e := range p.Events() {
				if e.Kind != EventLaunched {
					continue
				}
				if at, ok := noticed[e.InstanceID]; ok {
					exposure += at.Sub(e.At)
					notices++
				} else {
					exposure += tc.horizon
				}
			}
			expected := tc.want * exposure.Hours()
			tol := 4 * math.Sqrt(expected)
			if math.Abs(float64(notices)-expected) > tol {
				t.Errorf("%d notices over %.0f instance-hours, want %.0f ± %.0f (rate %.3g/h)", notices, exposure.Hours(), expected, tol, tc.want)
			}
			if notices < 100 {
				t.Errorf("only %d notices: too few to test the rate", notices)
			}
		})
	}
}

func TestNoticeLeadPerCloud(t *testing.T) {
	for cloud, lead := range map[string]time.Duration{"aws": 2 * time.Minute, "gcp": 30 * time.Second, "azure": 30 * time.Second, "oci": 30 * time.Second} {
		t.Run(cloud, func(t *testing.T) {
			t.Parallel()
			spot := findOffer(t, offerOf(cloud, model.Spot, 0))
			p, clk := newSim(t, Config{Seed: 3, Scenario: &Scenario{Offers: []OfferRule{{Match: exact(spot), Capacity: ptr(2), InterruptAfter: ptr(model.Duration(10 * time.Minute))}}}})
			drawn := launch(t, p, spot, "drawn")
			manual := launch(t, p, spot, "manual")
			clk.Advance(time.Minute)
			n, err := p.Interrupt(ctx, manual.ID)
			if err != nil {
				t.Fatal(err)
			}
			at := t0.Add(time.Minute)
			if diff := cmp.Diff(provider.Notice{InstanceID: manual.ID, IssuedAt: at, Deadline: at.Add(lead), Reason: ReasonManual}, n); diff != "" {
				t.Errorf("manual notice (-want +got):\n%s", diff)
			}
			clk.Advance(9 * time.Minute)
			got, _ := p.Notices(ctx)
			at = t0.Add(10 * time.Minute)
			want := []provider.Notice{{InstanceID: drawn.ID, IssuedAt: at, Deadline: at.Add(lead), Reason: ReasonSpot}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("notices at +10m (-want +got):\n%s", diff)
			}
			clk.Advance(lead - time.Second)
			if inv, _ := p.List(ctx); len(inv) != 1 || inv[0].ID != drawn.ID {
				t.Errorf("inventory a second before the deadline = %+v, want only %s", inv, drawn.ID)
			}
			clk.Advance(time.Second)
			if inv, _ := p.List(ctx); len(inv) != 0 {
				t.Errorf("inventory at the deadline = %+v, want none", inv)
			}
			evs := p.Events()
			last := evs[len(evs)-1]
			if last.Kind != EventInterrupted || last.InstanceID != drawn.ID || !last.At.Equal(at.Add(lead)) {
				t.Errorf("last event = %+v, want %s interrupted at +10m+%v", last, drawn.ID, lead)
			}
		})
	}
}

func TestBootDelayPerCloud(t *testing.T) {
	for cloud, want := range map[string][2]time.Duration{
		"aws": {100 * time.Second, 150 * time.Second}, "gcp": {130 * time.Second, 160 * time.Second},
		"azure": {320 * time.Second, 380 * time.Second}, "lambda": {180 * time.Second, 300 * time.Second},
	} {
		t.Run(cloud, func(t *testing.T) {
			t.Parallel()
			o := findOffer(t, offerOf(cloud, model.OnDemand, 1))
			p, clk := newSim(t, Config{Seed: 5, Scenario: &Scenario{Offers: []OfferRule{{Match: exact(o), Capacity: ptr(50)}}}})
			for i := range 50 {
				in := launch(t, p, o, fmt.Sprint(i))
				if in.State != provider.StatePending {
					t.Fatalf("state at launch = %q, want pending", in.State)
				}
			}
			clk.Advance(time.Hour)
			launched := map[string]time.Time{}
			var lo, hi time.Duration = math.MaxInt64, 0
			for _, e := range p.Events() {
				switch e.Kind {
				case EventLaunched:
					launched[e.InstanceID] = e.At
				case EventRunning:
					d := e.At.Sub(launched[e.InstanceID])
					lo, hi = min(lo, d), max(hi, d)
				}
			}
			if lo < want[0] || hi > want[1] || hi-lo < (want[1]-want[0])/2 {
				t.Errorf("boot delays span %v–%v, want within %v–%v and spread across it", lo, hi, want[0], want[1])
			}
		})
	}
}

func TestTimeScaleCompressesBootAndNotice(t *testing.T) {
	o := findOffer(t, offerOf("aws", model.Spot, 1))
	p, clk := newSim(t, Config{Seed: 1, TimeScale: 60})
	in := launch(t, p, o, "x")
	clk.Advance(3 * time.Second)
	if inv, _ := p.List(ctx); len(inv) != 1 || inv[0].State != provider.StateRunning {
		t.Errorf("inventory 3s after launch at 60× = %+v, want running", inv)
	}
	n, err := p.Interrupt(ctx, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Deadline.Sub(n.IssuedAt); got != 2*time.Second {
		t.Errorf("notice lead at 60× = %v, want 2s", got)
	}
}

func TestBillingPerSecondExact(t *testing.T) {
	h100 := model.Offer{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", GPU: "H100", GPUCount: 8, CapacityType: model.OnDemand, PricePerHour: 98.32}
	tiny := h100
	tiny.InstanceType, tiny.PricePerHour = "tiny", 0.000123
	spot := h100
	spot.CapacityType, spot.PricePerHour = model.Spot, 3.06
	for name, tc := range map[string]struct {
		offer model.Offer
		run   time.Duration
		want  provider.Usage
	}{
		"nothing at launch":           {offer: h100, run: 0, want: provider.Usage{Seconds: 0, MicroUSD: 0}},
		"part second is not billed":   {offer: h100, run: 999 * time.Millisecond, want: provider.Usage{Seconds: 0, MicroUSD: 0}},
		"one second":                  {offer: h100, run: time.Second, want: provider.Usage{Seconds: 1, MicroUSD: 27311}},
		"59.999s bills 59s, half up":  {offer: h100, run: 59999 * time.Millisecond, want: provider.Usage{Seconds: 59, MicroUSD: 1611356}},
		"one hour is the list price":  {offer: h100, run: time.Hour, want: provider.Usage{Seconds: 3600, MicroUSD: 98320000}},
		"hour and a second":           {offer: h100, run: time.Hour + time.Second, want: provider.Usage{Seconds: 3601, MicroUSD: 98347311}},
		"thirty days and a second":    {offer: h100, run: 30*24*time.Hour + time.Second, want: provider.Usage{Seconds: 2592001, MicroUSD: 70790427311}},
		"sub-micro-dollar price":      {offer: tiny, run: 59 * time.Second, want: provider.Usage{Seconds: 59, MicroUSD: 2}},
		"interrupted spot stops bill": {offer: spot, run: 5 * time.Hour, want: provider.Usage{Seconds: 720, MicroUSD: 612000}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, clk := newSim(t, Config{Offers: []model.Offer{h100, tiny, spot}, Scenario: &Scenario{Offers: []OfferRule{
				{Match: Match{CapacityType: model.Spot}, InterruptAfter: ptr(model.Duration(10 * time.Minute))},
			}}})
			in := launch(t, p, tc.offer, "x")
			clk.Advance(tc.run)
			if tc.offer.CapacityType != model.Spot {
				if err := p.Terminate(ctx, in.ID); err != nil {
					t.Fatal(err)
				}
				clk.Advance(time.Hour) // a stopped instance costs nothing more
			}
			got, err := p.Usage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			want.InstanceID, want.Offer, want.Start = in.ID, tc.offer, t0
			want.End = t0.Add(time.Duration(want.Seconds) * time.Second)
			if tc.offer.CapacityType != model.Spot {
				want.End = t0.Add(tc.run)
			}
			if diff := cmp.Diff([]provider.Usage{want}, got); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLaunchErrorsTyped(t *testing.T) {
	o := findOffer(t, offerOf("aws", model.OnDemand, 8))
	type attempt struct {
		ok       bool
		capacity bool
		quota    bool
		trans    bool
	}
	okA, capA, quoA, traA := attempt{ok: true}, attempt{capacity: true}, attempt{quota: true}, attempt{trans: true}
	for name, tc := range map[string]struct {
		cloud CloudSpec
		rule  OfferRule
		want  []attempt
	}{
		"capacity two":           {rule: OfferRule{Capacity: ptr(2)}, want: []attempt{okA, okA, capA, capA}},
		"capacity zero":          {rule: OfferRule{Capacity: ptr(0)}, want: []attempt{capA}},
		"quota of two instances": {cloud: CloudSpec{Quota: map[string]int{o.GPU: 2 * o.GPUCount}}, rule: OfferRule{Capacity: ptr(10)}, want: []attempt{okA, okA, quoA}},
		"quota before capacity":  {cloud: CloudSpec{Quota: map[string]int{"*": 0}}, rule: OfferRule{Capacity: ptr(0)}, want: []attempt{quoA}},
		"first two transient":    {rule: OfferRule{Fail: &Failure{First: 2, Error: FailTransient}}, want: []attempt{traA, traA, okA}},
		"injected capacity":      {rule: OfferRule{Fail: &Failure{First: 1}}, want: []attempt{capA, okA}},
		"always quota":           {rule: OfferRule{Fail: &Failure{Probability: 1, Error: FailQuotaExceeded}}, want: []attempt{quoA, quoA, quoA}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rule := tc.rule
			rule.Match = exact(o)
			scn := &Scenario{Offers: []OfferRule{rule}}
			if tc.cloud.Quota != nil {
				scn.Clouds = map[string]CloudSpec{"aws": tc.cloud}
			}
			p, _ := newSim(t, Config{Scenario: scn})
			var got []attempt
			for range tc.want {
				_, err := p.Launch(ctx, provider.LaunchRequest{Offer: o, Token: fmt.Sprint("t", len(got))})
				var ice *provider.InsufficientCapacityError
				a := attempt{ok: err == nil, quota: errors.Is(err, provider.ErrQuotaExceeded), trans: errors.Is(err, provider.ErrTransient)}
				if errors.As(err, &ice) {
					a.capacity = true
					if ice.Offer != o {
						t.Errorf("InsufficientCapacityError offer = %+v, want %+v", ice.Offer, o)
					}
				}
				got = append(got, a)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(attempt{})); diff != "" {
				t.Errorf("attempts (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("failed token retried", func(t *testing.T) {
		p, _ := newSim(t, Config{Scenario: &Scenario{Offers: []OfferRule{{Match: exact(o), Fail: &Failure{First: 1, Error: FailTransient}}}}})
		if _, err := p.Launch(ctx, provider.LaunchRequest{Offer: o, Token: "same"}); !provider.IsTransient(err) {
			t.Fatalf("first launch error = %v, want transient", err)
		}
		launch(t, p, o, "same")
		if evs := p.Events(); len(evs) != 2 || evs[0].Kind != EventLaunchFailed || evs[1].Kind != EventLaunched {
			t.Errorf("events = %+v, want launch-failed then launched", evs)
		}
	})
	t.Run("probability is deterministic and near its value", func(t *testing.T) {
		count := func(seed int64) int {
			p, _ := newSim(t, Config{Seed: seed, Scenario: &Scenario{Offers: []OfferRule{{Match: exact(o), Capacity: ptr(0), Fail: &Failure{Probability: 0.25, Error: FailTransient}}}}})
			n := 0
			for i := range 2000 {
				if _, err := p.Launch(ctx, provider.LaunchRequest{Offer: o, Token: fmt.Sprint(i)}); provider.IsTransient(err) {
					n++
				}
			}
			return n
		}
		a, b := count(11), count(11)
		if a != b {
			t.Errorf("same seed gave %d and %d injected failures", a, b)
		}
		if a < 500-4*19 || a > 500+4*19 {
			t.Errorf("%d of 2000 launches failed at probability 0.25, want 500 ± 76", a)
		}
	})
}

func TestNewRejectsWhatItCannotSimulate(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"unknown provider": {cfg: Config{Providers: []string{"aws", "ibm"}}, want: `providers: no cloud "ibm"`},
		"unknown cloud":    {cfg: Config{Scenario: &Scenario{Clouds: map[string]CloudSpec{"amazon": {}}}}, want: "clouds.amazon: no such cloud"},
		"rule matches nothing": {cfg: Config{Scenario: &Scenario{Offers: []OfferRule{{Match: Match{Cloud: "aws", Region: "us-east1"}, Capacity: ptr(1)}}}},
			want: "offers[0].match: matches no offer"},
		"invalid scenario": {cfg: Config{Scenario: &Scenario{Offers: []OfferRule{{Capacity: ptr(-1)}}}}, want: "offers[0].capacity: must be >= 0"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.cfg.Catalog = cat(t)
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestProvidersFilter(t *testing.T) {
	p, _ := newSim(t, Config{Providers: []string{"gcp", "lambda"}})
	offers, _ := p.Offers(ctx)
	got := map[string]bool{}
	for _, o := range offers {
		got[o.Provider] = true
	}
	if diff := cmp.Diff(map[string]bool{"gcp": true, "lambda": true}, got); diff != "" {
		t.Errorf("clouds offered (-want +got):\n%s", diff)
	}
	all, _ := newSim(t, Config{})
	allOffers, _ := all.Offers(ctx)
	if len(allOffers) != len(cat(t).Offers()) {
		t.Errorf("a sim of every cloud offers %d, the catalog %d", len(allOffers), len(cat(t).Offers()))
	}
}

// TestVersionCoversWhatListsChange drives a simulator through random
// launches, terminations, interruptions and clock steps (boots, notices
// and spot stops fall due on their own) and checks provider.Versioned's
// promise: whenever Version is what it was at the last listing, List,
// Notices and the stopped instances' bills are what they were then.
func TestVersionCoversWhatListsChange(t *testing.T) {
	clk := clock.NewFake(t0)
	o := findOffer(t, offerOf("aws", model.Spot, 8))
	od := findOffer(t, offerOf("aws", model.OnDemand, 8))
	scn := &Scenario{Offers: []OfferRule{{Match: exact(o), InterruptionRate: ptr(0.5)}}}
	p, err := New(Config{Catalog: cat(t), Clock: clk, Seed: 3, Scenario: scn})
	if err != nil {
		t.Fatal(err)
	}
	type listed struct {
		instances []provider.Instance
		notices   []provider.Notice
		stopped   []provider.Usage
	}
	list := func() listed {
		var l listed
		var err error
		if l.instances, err = p.List(ctx); err != nil {
			t.Fatal(err)
		}
		if l.notices, err = p.Notices(ctx); err != nil {
			t.Fatal(err)
		}
		us, err := p.Usage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range us {
			if !u.Running {
				l.stopped = append(l.stopped, u)
			}
		}
		return l
	}
	version := p.Version()
	last := list()
	kept, moved := 0, 0
	for step := range 600 {
		switch k := (step * 7919) % 11; {
		case k < 3:
			offer := o
			if k == 0 {
				offer = od
			}
			_, _ = p.Launch(ctx, provider.LaunchRequest{Offer: offer, Token: fmt.Sprintf("t%d", step)})
		case k == 3 && len(last.instances) > 0:
			if err := p.Terminate(ctx, last.instances[step%len(last.instances)].ID); err != nil {
				t.Fatal(err)
			}
		case k == 4 && len(last.instances) > 0:
			_, _ = p.Interrupt(ctx, last.instances[step%len(last.instances)].ID)
		default:
			clk.Advance(time.Duration(step%5) * 20 * time.Second)
		}
		v := p.Version()
		now := list()
		if v == version {
			kept++
			if !cmp.Equal(now, last, cmp.AllowUnexported(listed{})) {
				t.Fatalf("step %d: version %d unchanged, but the listing changed:\n%s", step, v, cmp.Diff(last, now, cmp.AllowUnexported(listed{})))
			}
			continue
		}
		moved++
		version, last = v, now
	}
	if kept < 100 || moved < 100 {
		t.Fatalf("version kept %d times, moved %d: the run does not exercise both", kept, moved)
	}
}
