package simulate

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet/internal/autoscaler"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/cost/purchase"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
	"github.com/gpufleet/gpufleet/internal/provider/static"
)

// Result is a run's totals.
type Result struct {
	Trace string `json:"trace"`
	Seed  int64  `json:"seed"`
	// Jobs in the trace (window); Completed succeeded, Failed ended
	// otherwise, Unfinished had not ended at the horizon.
	Jobs       int `json:"jobs"`
	Completed  int `json:"completed"`
	Failed     int `json:"failed"`
	Unfinished int `json:"unfinished"`
	// Queue wait: submission to the first attempt's start, over the jobs
	// that started.
	WaitMean time.Duration `json:"waitMean"`
	WaitP50  time.Duration `json:"waitP50"`
	WaitP95  time.Duration `json:"waitP95"`
	WaitP99  time.Duration `json:"waitP99"`
	// JCT (job completion time): submission to success, over the jobs
	// that succeeded.
	JCTMean time.Duration `json:"jctMean"`
	JCTP50  time.Duration `json:"jctP50"`
	JCTP95  time.Duration `json:"jctP95"`
	JCTP99  time.Duration `json:"jctP99"`
	// Deadlines counts the jobs with one; MissedDeadlines those that did
	// not succeed by it.
	Deadlines       int `json:"deadlines"`
	MissedDeadlines int `json:"missedDeadlines"`
	// GPUUtilisation is the GPU-seconds replicas held over the GPU-seconds
	// the clouds billed (boot and idle time included) plus those of the
	// owned machines from their registration to the end.
	GPUUtilisation float64 `json:"gpuUtilisation"`
	// CostUSD is the ledger's total; CostByCapacity splits it by capacity
	// type (on-demand, spot, reserved, owned). BilledUSD is what the
	// simulated clouds charged, which the ledger less the owned machines
	// must equal.
	CostUSD        float64            `json:"costUsd"`
	CostByCapacity map[string]float64 `json:"costByCapacity"`
	BilledUSD      float64            `json:"billedUsd"`
	// LedgerRows counts the ledger entries the run wrote.
	LedgerRows int `json:"ledgerRows"`
	// Instances launched; Interruptions are spot stops by the clouds;
	// Preemptions counts jobs' involuntary interruptions; LostWork is the
	// work redone after them (since the last checkpoint).
	Instances     int           `json:"instances"`
	Interruptions int           `json:"interruptions"`
	Preemptions   int           `json:"preemptions"`
	LostWork      time.Duration `json:"lostWork"`
	// LaunchRefusals counts the launches the simulated clouds refused, by
	// kind (sim.Event.Refusal: quota-exceeded, the cloud's GPU quota for
	// the model; insufficient-capacity, the offer's instances all in use;
	// transient); PeakInstances and PeakGPUs are the most instances, and
	// their GPUs, live at once. Together they say whether the fleet could
	// grow to its pools' max.
	LaunchRefusals map[string]int `json:"launchRefusals"`
	PeakInstances  int            `json:"peakInstances"`
	PeakGPUs       int            `json:"peakGpus"`
	// OwnedMachines and OwnedGPUs are the owned machines (static pools)
	// and their GPUs; they run, and are charged in the ledger at their
	// pricePerHour under "owned", for the whole run. The clouds' bill
	// (BilledUSD) does not include them.
	OwnedMachines int `json:"ownedMachines"`
	OwnedGPUs     int `json:"ownedGpus"`
	// Purchase is the purchase-mix recommendation (package purchase)
	// computed on the simulated ledger's hourly GPU use, per GPU model.
	Purchase []Purchase `json:"purchase"`
	// Simulated is the simulated time from the first submission to the
	// end; Steps counts clock steps; Wall is the run's wall-clock time
	// (not part of the digest).
	Simulated time.Duration `json:"simulated"`
	Steps     int           `json:"steps"`
	Wall      time.Duration `json:"wall"`
	// Passes counts the scheduling passes that ran the scheduler and
	// PassJobs the queued jobs they were given, summed: what scheduling
	// cost, whatever the machine (not part of the digest).
	Passes   int `json:"passes"`
	PassJobs int `json:"passJobs"`
	// Decides counts the scale cycles that ran the autoscaler's decision
	// and DecidesSkipped those that knew it would decide nothing
	// (controller.ScaleStats).
	Decides        int `json:"decides"`
	DecidesSkipped int `json:"decidesSkipped"`
	// Digest is a SHA-256 over every job's outcome and every cloud event:
	// equal for equal inputs and seed.
	Digest string `json:"digest"`
	// Series is the run hour by hour (plots); Waits every started job's
	// wait, sorted (the wait CDF).
	Series []Point         `json:"series,omitempty"`
	Waits  []time.Duration `json:"-"`
	// Placements are every attempt's replicas, job by job in submission
	// order (the one-code-path test compares them with `up --sim`).
	Placements []Placement `json:"-"`
}

// Placement is where one attempt of a trace job ran: per replica, its
// node and GPU indexes.
type Placement struct {
	Job     string // the trace's id
	Attempt int
	Nodes   []string
	GPUs    [][]int
}

// Point is one simulated hour.
type Point struct {
	At time.Time `json:"at"`
	// Queued and Running are the jobs waiting and running at the hour's
	// first step (carried over from the last step when it had none).
	Queued  int `json:"queued"`
	Running int `json:"running"`
	// QueuedGPUs is the GPUs (per replica × replicas) the jobs not yet
	// started asked for, at the same step; Instances the most instances
	// live at once in the hour.
	QueuedGPUs float64 `json:"queuedGpus"`
	Instances  int     `json:"instances"`
	// CostUSD is the ledger's spend in the hour by capacity type.
	CostUSD map[string]float64 `json:"costUsd"`
	// AllocatedGPUHours and MeteredGPUHours are the GPU time the ledger
	// metered in the hour held by jobs, and in all (held and idle).
	AllocatedGPUHours float64 `json:"allocatedGpuHours"`
	MeteredGPUHours   float64 `json:"meteredGpuHours"`
}

// Purchase is purchase.Recommend's answer for one GPU model on the
// simulated usage, with the prices it used.
type Purchase struct {
	purchase.Recommendation
	// OnDemandPerGPUHour and SpotPerGPUHour are the cheapest simulated
	// offers of the model; Cloud sells the on-demand one, whose default
	// 1-year commitment discount (purchase.DefaultDiscounts) is Discount.
	OnDemandPerGPUHour float64 `json:"onDemandPerGpuHour"`
	SpotPerGPUHour     float64 `json:"spotPerGpuHour,omitempty"`
	Cloud              string  `json:"cloud"`
	Discount           float64 `json:"discount"`
	Hours              int     `json:"hours"`
}

// queueSample is the job counts at one hour's first step.
type queueSample struct {
	queued, running int
	gpus            float64
}

func finish(ctx context.Context, res *Result, c *controller.Controller, sp *sim.Provider, ms *memStore, r *runner, order []string, now time.Time, queue map[time.Time]queueSample) (*Result, error) {
	h := sha256.New()
	var waits, jcts []time.Duration
	for _, id := range order {
		j, err := c.Job(id)
		if err != nil {
			return nil, err
		}
		switch {
		case j.State == model.JobSucceeded:
			res.Completed++
		case j.State.Terminal():
			res.Failed++
		default:
			res.Unfinished++
		}
		res.Preemptions += j.Preemptions
		v := r.jobs[id]
		if !v.firstStart.IsZero() {
			waits = append(waits, v.firstStart.Sub(v.submitted))
		}
		if j.State == model.JobSucceeded && !v.end.IsZero() {
			jcts = append(jcts, v.end.Sub(v.submitted))
		}
		if d := j.Spec.Limits.Deadline; d != nil {
			res.Deadlines++
			if j.State != model.JobSucceeded || v.end.IsZero() || v.end.After(*d) {
				res.MissedDeadlines++
			}
		}
		fmt.Fprintf(h, "job %s %s %d %s\n", id, j.State, j.Attempts, v.firstStart.Format(time.RFC3339))
		attempts, err := c.Attempts(id)
		if err != nil {
			return nil, err
		}
		for _, a := range attempts {
			pl := Placement{Job: j.Tags["trace.job"], Attempt: a.Number}
			for _, rp := range a.Replicas {
				pl.Nodes, pl.GPUs = append(pl.Nodes, rp.NodeID), append(pl.GPUs, slices.Clone(rp.GPUs))
			}
			res.Placements = append(res.Placements, pl)
		}
	}
	res.WaitMean, res.WaitP50, res.WaitP95, res.WaitP99 = summary(waits)
	res.JCTMean, res.JCTP50, res.JCTP95, res.JCTP99 = summary(jcts)
	res.Waits = waits

	ms.mu.Lock()
	total := ms.total
	byCap := maps.Clone(ms.byCap)
	res.LedgerRows = ms.rows
	res.Series = series(ms, queue)
	gpuHours, spotHours := ms.gpuHours, ms.spotHours
	ms.mu.Unlock()
	res.CostByCapacity = map[string]float64{string(model.OnDemand): 0, string(model.Spot): 0, string(model.Reserved): 0, string(model.Owned): 0}
	res.CostUSD = total.Dollars()
	for k, v := range byCap {
		res.CostByCapacity[string(k)] = v.Dollars()
	}
	usage, err := sp.Usage(ctx)
	if err != nil {
		return nil, err
	}
	var billed int64
	var gpuSeconds float64
	for _, u := range usage {
		billed += u.MicroUSD
		gpuSeconds += float64(u.Seconds) * float64(u.Offer.GPUCount)
	}
	for _, n := range c.Nodes() {
		if n.Provider == static.Name {
			res.OwnedMachines++
			res.OwnedGPUs += len(n.GPUs)
			gpuSeconds += float64(len(n.GPUs)) * now.Sub(n.RegisteredAt).Seconds()
		}
	}
	res.Instances = len(usage)
	res.BilledUSD = model.Money(billed).Dollars()
	if gpuSeconds > 0 {
		res.GPUUtilisation = r.busyGPUSeconds / gpuSeconds
	}
	res.LaunchRefusals = map[string]int{}
	peak, last := map[time.Time]int{}, map[time.Time]int{} // per hour: the most instances live, and at its end
	var instances, gpus int
	for _, e := range sp.Events() {
		switch e.Kind {
		case sim.EventInterrupted:
			res.Interruptions++
			instances, gpus = instances-1, gpus-e.Offer.GPUCount
		case sim.EventTerminated:
			instances, gpus = instances-1, gpus-e.Offer.GPUCount
		case sim.EventLaunched:
			instances, gpus = instances+1, gpus+e.Offer.GPUCount
			res.PeakInstances, res.PeakGPUs = max(res.PeakInstances, instances), max(res.PeakGPUs, gpus)
		case sim.EventLaunchFailed:
			res.LaunchRefusals[e.Refusal]++
		}
		hour := e.At.Truncate(time.Hour)
		peak[hour], last[hour] = max(peak[hour], instances), instances
		fmt.Fprintf(h, "sim %s %s %s %s %s\n", e.At.Format(time.RFC3339Nano), e.Kind, e.InstanceID, autoscaler.OfferKey(e.Offer), e.Detail)
	}
	live := 0 // at the start of the point's hour
	for i := range res.Series {
		p := &res.Series[i]
		p.Instances = live
		if n, ok := peak[p.At]; ok {
			p.Instances, live = max(live, n), last[p.At]
		}
	}
	res.LostWork = r.lostWork
	res.Simulated = now.Sub(Start)
	offers, err := sp.Offers(ctx)
	if err != nil {
		return nil, err
	}
	overhead := 0.0
	if r.busyGPUSeconds > 0 {
		overhead = min(0.9, r.lostWork.Seconds()/r.busyGPUSeconds)
	}
	res.Purchase = recommend(gpuHours, spotHours, offers, overhead)
	fmt.Fprintf(h, "end %s %d %d\n", res.Simulated, total, billed)
	res.Digest = fmt.Sprintf("%x", h.Sum(nil))
	return res, nil
}

// series joins the ledger's hours and the queue samples, hour by hour
// from the first to the last (hours without a sample carry the last one).
// Callers hold ms.mu.
func series(ms *memStore, queue map[time.Time]queueSample) []Point {
	var first, last time.Time
	for _, m := range []map[time.Time]queueSample{queue} {
		for t := range m {
			if first.IsZero() || t.Before(first) {
				first = t
			}
			if t.After(last) {
				last = t
			}
		}
	}
	for t := range ms.hourly {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	if first.IsZero() {
		return nil
	}
	var out []Point
	var q queueSample
	for t := first; !t.After(last); t = t.Add(time.Hour) {
		if s, ok := queue[t]; ok {
			q = s
		}
		p := Point{At: t, Queued: q.queued, Running: q.running, QueuedGPUs: q.gpus, CostUSD: map[string]float64{}}
		for k, v := range ms.hourly[t] {
			p.CostUSD[string(k)] = v.Dollars()
		}
		if g := ms.metered[t]; g != nil {
			p.AllocatedGPUHours, p.MeteredGPUHours = g[0]/3600, g[1]/3600
		}
		out = append(out, p)
	}
	return out
}

// recommend runs purchase.Recommend per GPU model on the ledger's hourly
// GPU use, priced at the cheapest simulated offers of the model; overhead
// is the share of busy time the run lost to interruptions (the spot
// overhead).
func recommend(gpuHours, spotHours map[string]map[time.Time]float64, offers []model.Offer, overhead float64) []Purchase {
	out := []Purchase{}
	for _, m := range slices.Sorted(maps.Keys(gpuHours)) {
		var od, spot *model.Offer
		for i := range offers {
			o := &offers[i]
			if o.GPU != m || o.GPUCount == 0 {
				continue
			}
			switch o.CapacityType {
			case model.OnDemand:
				if od == nil || o.PricePerGPUHour() < od.PricePerGPUHour() {
					od = o
				}
			case model.Spot:
				if spot == nil || o.PricePerGPUHour() < spot.PricePerGPUHour() {
					spot = o
				}
			}
		}
		if od == nil {
			// The fleet buys the model only on spot: price on-demand from
			// the catalog is unknown here; commitments are not judged.
			out = append(out, Purchase{Recommendation: purchase.Recommendation{GPUModel: m, Reason: "the fleet buys no on-demand offer of this model"}})
			continue
		}
		hours := hourly(gpuHours[m])
		spotUse := alignTo(spotHours[m], gpuHours[m])
		disc, ok := purchase.Discount(nil, od.Provider, 12)
		if !ok {
			disc = purchase.DefaultDiscounts["aws"][12]
		}
		p := Purchase{OnDemandPerGPUHour: od.PricePerGPUHour(), Cloud: od.Provider, Discount: disc, Hours: len(hours)}
		sp := od.PricePerGPUHour() * 0.4
		if spot != nil {
			sp, p.SpotPerGPUHour = spot.PricePerGPUHour(), spot.PricePerGPUHour()
		}
		rec, err := purchase.Recommend(purchase.Input{GPUModel: m, Usage: hours, Interruptible: spotUse, OnDemand: od.PricePerGPUHour(),
			Term: purchase.Term{Cloud: od.Provider, Months: 12, Discount: disc}, SpotPrice: sp, SpotOverhead: overhead})
		if err != nil {
			rec = purchase.Recommendation{GPUModel: m, Reason: err.Error()}
		}
		if math.IsInf(rec.BreakEvenMonths, 0) {
			rec.BreakEvenMonths = -1 // JSON has no infinity: never pays
		}
		p.Recommendation = rec
		out = append(out, p)
	}
	return out
}

// hourly lists m's hours from the first to the last, 0 where missing.
func hourly(m map[time.Time]float64) []float64 {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b time.Time) int { return a.Compare(b) })
	if len(keys) == 0 {
		return nil
	}
	out := make([]float64, int(keys[len(keys)-1].Sub(keys[0])/time.Hour)+1)
	for _, t := range keys {
		out[int(t.Sub(keys[0])/time.Hour)] = m[t]
	}
	return out
}

// alignTo lists m over like's hours.
func alignTo(m, like map[time.Time]float64) []float64 {
	keys := slices.SortedFunc(maps.Keys(like), func(a, b time.Time) int { return a.Compare(b) })
	if len(keys) == 0 {
		return nil
	}
	out := make([]float64, int(keys[len(keys)-1].Sub(keys[0])/time.Hour)+1)
	for t, v := range m {
		if i := int(t.Sub(keys[0]) / time.Hour); i >= 0 && i < len(out) {
			out[i] = v
		}
	}
	return out
}

// summary is the mean, p50, p95 and p99 of ds (sorted in place).
func summary(ds []time.Duration) (mean, p50, p95, p99 time.Duration) {
	if len(ds) == 0 {
		return
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	slices.Sort(ds)
	return sum / time.Duration(len(ds)), quantile(ds, 0.50), quantile(ds, 0.95), quantile(ds, 0.99)
}

// quantile is the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
