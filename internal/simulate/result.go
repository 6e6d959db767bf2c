package simulate

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet/internal/autoscaler"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
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
	// GPUUtilisation is the GPU-seconds replicas held over the GPU-seconds
	// the clouds billed (boot and idle time included).
	GPUUtilisation float64 `json:"gpuUtilisation"`
	// CostUSD is the ledger's total; CostByCapacity splits it by capacity
	// type (on-demand, spot, reserved). BilledUSD is what the simulated
	// clouds charged, which the ledger must equal.
	CostUSD        float64            `json:"costUsd"`
	CostByCapacity map[string]float64 `json:"costByCapacity"`
	BilledUSD      float64            `json:"billedUsd"`
	// Instances launched; Interruptions are spot stops by the clouds;
	// Preemptions counts jobs' involuntary interruptions; LostWork is the
	// work redone after them (since the last checkpoint).
	Instances     int           `json:"instances"`
	Interruptions int           `json:"interruptions"`
	Preemptions   int           `json:"preemptions"`
	LostWork      time.Duration `json:"lostWork"`
	// Simulated is the simulated time from the first submission to the
	// end; Steps counts clock steps; Wall is the run's wall-clock time
	// (not part of the digest).
	Simulated time.Duration `json:"simulated"`
	Steps     int           `json:"steps"`
	Wall      time.Duration `json:"wall"`
	// Digest is a SHA-256 over every job's outcome and every cloud event:
	// equal for equal inputs and seed.
	Digest string `json:"digest"`
}

func finish(ctx context.Context, res *Result, c *controller.Controller, sp *sim.Provider, ms *memStore, r *runner, order []string, now time.Time) (*Result, error) {
	h := sha256.New()
	var waits []time.Duration
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
		fmt.Fprintf(h, "job %s %s %d %s\n", id, j.State, j.Attempts, v.firstStart.Format(time.RFC3339))
	}
	if len(waits) > 0 {
		var sum time.Duration
		for _, w := range waits {
			sum += w
		}
		slices.Sort(waits)
		res.WaitMean = sum / time.Duration(len(waits))
		res.WaitP50, res.WaitP95, res.WaitP99 = quantile(waits, 0.50), quantile(waits, 0.95), quantile(waits, 0.99)
	}
	res.CostByCapacity = map[string]float64{string(model.OnDemand): 0, string(model.Spot): 0, string(model.Reserved): 0}
	ms.mu.Lock()
	total := ms.total
	byCap := maps.Clone(ms.byCap)
	ms.mu.Unlock()
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
	res.Instances = len(usage)
	res.BilledUSD = model.Money(billed).Dollars()
	if gpuSeconds > 0 {
		res.GPUUtilisation = r.busyGPUSeconds / gpuSeconds
	}
	for _, e := range sp.Events() {
		if e.Kind == sim.EventInterrupted {
			res.Interruptions++
		}
		fmt.Fprintf(h, "sim %s %s %s %s %s\n", e.At.Format(time.RFC3339Nano), e.Kind, e.InstanceID, autoscaler.OfferKey(e.Offer), e.Detail)
	}
	res.LostWork = r.lostWork
	res.Simulated = now.Sub(Start)
	fmt.Fprintf(h, "end %s %d %d\n", res.Simulated, total, billed)
	res.Digest = fmt.Sprintf("%x", h.Sum(nil))
	return res, nil
}

// quantile is the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
