package advisor

import (
	"cmp"
	"fmt"
	"math"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Capacity labels of ranked rows: the offer's capacity type, or a derived
// reserved price.
const (
	Reserved1y = "reserved-1y"
	Reserved3y = "reserved-3y"
)

// reservedDiscounts are public commitment discounts off on-demand for GPU
// instances, by provider and term. The catalog has no reserved prices, so
// rows priced with these are marked derived.
//   - AWS: EC2 Instance Savings Plans, no upfront, P4d/P5 in us-east-1: about
//     35% (1 year) and 55% (3 years) (aws.amazon.com/savingsplans/pricing).
//   - GCP: resource-based committed use discounts for GPUs (A2/A3): 37%
//     (1 year) and 55% (3 years) (cloud.google.com/compute/docs/instances/
//     committed-use-discounts-overview).
//   - Azure: Reserved VM Instances for ND/NC series: about 37% (1 year) and
//     60% (3 years) (azure.microsoft.com/pricing/reserved-vm-instances).
//
// OCI, Lambda and Vast publish no standard GPU commitment discount.
var reservedDiscounts = map[string][2]float64{
	"aws":   {0.35, 0.55},
	"gcp":   {0.37, 0.55},
	"azure": {0.37, 0.60},
}

// Options are the inputs to Rank besides the profile. The zero value of
// every field means its default.
type Options struct {
	// Offers to rank, usually the catalog's (Rank only reads them, so a
	// shared slice will do); Accelerator looks up a GPU model's facts,
	// usually catalog.Accelerator.
	Offers      []model.Offer
	Accelerator func(name string) (catalog.Accelerator, bool)
	// Calibration holds measured rates; zero means datasheet rates.
	Calibration Calibration
	// Filters; empty means all. GPUs and providers match without case,
	// regions by path.Match pattern, capacity by on-demand, spot, reserved.
	GPUs      []string
	Providers []string
	Regions   []string
	Capacity  []string
	// InstanceTypes are instance-type patterns (path.Match, e.g.
	// "p4d.*"); empty means all.
	InstanceTypes []string
	// ReservedTerm is "1y" (default), "3y" or "none".
	ReservedTerm string
	// Deadline, if set, ranks plans that finish within it first and lets
	// the search add nodes to meet it.
	Deadline time.Duration
	// MaxNodes bounds multi-node plans (default 64).
	MaxNodes int
	// CheckpointGBs is checkpoint write bandwidth per node in GB/s (default
	// 1: one NVMe or an object-store upload stream per node).
	CheckpointGBs float64
	// Restart is the time to replace an interrupted (spot) or failed node
	// and resume: boot, image pull, checkpoint load (default 10m).
	Restart time.Duration
	// Limit is the most rows to return (default 50; negative means all).
	Limit int
	// Explain attaches the memory and time breakdown to each row.
	Explain bool
	// MeasuredTFLOPS (model TFLOP/s per GPU) or MeasuredTokensPerSecond
	// (training tokens/s per GPU) replace the utilisation model.
	MeasuredTFLOPS          float64
	MeasuredTokensPerSecond float64
	// PricePerGPUHour, when > 0, prices every offer at this USD rate per
	// GPU-hour instead of its listed price; reserved rows (derived from the
	// listed price) are left out.
	PricePerGPUHour float64

	// exhaustive turns the search's pruning off, and noMemo its memo of
	// plans' memory (tests compare the rankings with and without).
	exhaustive bool
	noMemo     bool
}

// Defaults for Options.CheckpointGBs and Options.Restart.
const (
	defaultCheckpointGBs = 1
	defaultRestart       = 10 * time.Minute
)

// Result is a ranking of offers for one workload.
type Result struct {
	Workload Summary `json:"workload"`
	// Rows are the offers where the workload fits, cheapest to finish first
	// (serving: cheapest per million output tokens).
	Rows []Row `json:"rows"`
	// Ranked counts every row before Limit; Offers counts offers looked at.
	Ranked int `json:"ranked"`
	Offers int `json:"offers"`
	// NotEstimated lists offers that could not be estimated, by GPU model.
	NotEstimated []NotEstimated `json:"notEstimated,omitempty"`
	// Shortfall, when no row fits, names the closest miss.
	Shortfall *Shortfall `json:"shortfall,omitempty"`
	// Assumptions apply to every row.
	Assumptions []string `json:"assumptions"`
}

// Summary is the resolved workload.
type Summary struct {
	Task             Task      `json:"task"`
	Model            string    `json:"model"`
	Parameters       float64   `json:"parameters"`
	ActiveParameters float64   `json:"activeParameters"`
	Adapters         float64   `json:"adapterParameters,omitempty"`
	Precision        Precision `json:"precision"`
	Optimizer        Optimizer `json:"optimizer,omitempty"`
	SequenceLength   int       `json:"sequenceLength,omitempty"`
	GlobalBatch      int       `json:"globalBatch,omitempty"`
	Tokens           float64   `json:"tokens,omitempty"`
	Steps            float64   `json:"steps,omitempty"`
	// ModelFLOPs is the training work without recomputation.
	ModelFLOPs float64 `json:"modelFLOPs,omitempty"`
	// ModelStatesBytes is weights + gradients + optimizer, unsharded.
	ModelStatesBytes int64 `json:"modelStatesBytes,omitempty"`
	// CheckpointBytes is a full checkpoint (weights and optimizer states;
	// adapters only for LoRA).
	CheckpointBytes int64 `json:"checkpointBytes,omitempty"`
	// LargestLayerParams is the largest module's parameters (what ZeRO-3
	// gathers at once).
	LargestLayerParams float64 `json:"largestLayerParams,omitempty"`
	// KVCachePerTokenBytes is the KV cache of one token, all layers.
	KVCachePerTokenBytes int64 `json:"kvCachePerTokenBytes,omitempty"`
}

// Row is one offer, costed with its best plan.
type Row struct {
	Provider     string  `json:"provider"`
	Region       string  `json:"region"`
	Zone         string  `json:"zone,omitempty"`
	InstanceType string  `json:"instanceType"`
	GPU          string  `json:"gpu"`
	GPUsPerNode  int     `json:"gpusPerNode"`
	Capacity     string  `json:"capacity"`
	PricePerHour float64 `json:"pricePerHour"` // per instance, as charged
	// Derived is true when the price is not a listed one (reserved).
	Derived bool `json:"derived,omitempty"`
	Nodes   int  `json:"nodes"`
	GPUs    int  `json:"gpus"`
	Plan    Plan `json:"plan"`
	// PlanText is Plan in one line.
	PlanText string `json:"planText"`
	// Time is the expected time to finish, spot interruptions included;
	// zero for serving without TotalTokens.
	Time  model.Duration `json:"time"`
	Hours float64        `json:"hours"`
	// Cost is the expected cost to finish in USD; CostPerHour the run rate.
	Cost        float64 `json:"cost"`
	CostPerHour float64 `json:"costPerHour"`
	// PerMTokens is USD per million output tokens (serving).
	PerMTokens float64 `json:"perMTokens,omitempty"`
	// TokensPerSecond is the plan's output throughput (serving).
	TokensPerSecond float64 `json:"tokensPerSecond,omitempty"`
	// SpotOverhead is the expected extra time from interruptions, as a
	// fraction of the uninterrupted time.
	SpotOverhead float64 `json:"spotOverhead,omitempty"`
	// CheckpointEvery is the Young/Daly checkpoint interval (spot).
	CheckpointEvery model.Duration `json:"checkpointEvery,omitempty"`
	// Margin is free memory per GPU after everything, allocator margin
	// included.
	MarginBytes int64    `json:"marginBytes"`
	MeetsTarget bool     `json:"meetsTarget"`
	Assumptions []string `json:"assumptions,omitempty"`
	Memory      *Memory  `json:"memory,omitempty"`
	Timing      *Timing  `json:"timing,omitempty"`
}

// NotEstimated is a GPU model whose offers could not be estimated.
type NotEstimated struct {
	GPU    string `json:"gpu"`
	Offers int    `json:"offers"`
	Reason string `json:"reason"`
}

// Shortfall names the configuration that came closest to fitting.
type Shortfall struct {
	GPU           string `json:"gpu"`
	InstanceType  string `json:"instanceType"`
	Plan          string `json:"plan"`
	ShortBytes    int64  `json:"shortBytes"` // per GPU
	CapacityBytes int64  `json:"capacityBytes"`
	Message       string `json:"message"`
}

// Rank estimates the workload on every offer and ranks the offers where it
// fits by expected cost to finish. An invalid profile is a
// model.FieldErrors error; a workload that fits nowhere is an empty Result
// with Shortfall set. The steps:
//  1. resolve and validate the profile;
//  2. filter the offers and group them by shape (GPU, count, memory,
//     fabric, host memory, network), since the plan search depends only on
//     the shape;
//  3. search plans once per shape (searchTraining, searchServing), the
//     shapes in parallel, their results used in the order the shapes were
//     met so the ranking does not depend on the core count;
//  4. cost each offer, and its derived reserved price, with its shape's
//     plans: price × nodes × time, with spot's expected interruption
//     overhead at the Young/Daly checkpoint interval;
//  5. keep the Limit best by meeting the deadline/latency target, then
//     cost, then time, then a fixed order over the offer's fields.
func Rank(p Profile, o Options) (Result, error) {
	w, fe := resolve(p)
	if err := fe.Err(); err != nil {
		return Result{}, err
	}
	if o.Accelerator == nil {
		o.Accelerator = func(string) (catalog.Accelerator, bool) { return catalog.Accelerator{}, false }
	}
	if o.MaxNodes <= 0 {
		o.MaxNodes = 64
	}
	if o.CheckpointGBs <= 0 {
		o.CheckpointGBs = defaultCheckpointGBs
	}
	if o.Restart <= 0 {
		o.Restart = defaultRestart
	}
	if o.Limit == 0 {
		o.Limit = 50
	}
	term := 0
	switch o.ReservedTerm {
	case "", "1y":
		o.ReservedTerm = "1y"
	case "3y":
		term = 1
	case "none":
	default:
		return Result{}, model.FieldErrors{{Path: "reservedTerm", Message: "must be 1y, 3y or none"}}
	}
	w.exhaustive = o.exhaustive
	res := Result{Workload: w.summary(), Rows: []Row{}}
	res.Assumptions = w.assumptions(o)

	// 2. Filter and group by shape.
	type shapeState struct {
		sh      shape
		hw      hardware
		firstIT string // instance type of the shape's first offer
		sr      searchResult
		ok      bool
		reason  string
	}
	// kept is an offer that passed the filters, with its shape.
	type kept struct {
		of             *model.Offer
		st             *shapeState
		isSpot, hasRes bool
		resDisc        [2]float64
	}
	shapes := map[shape]*shapeState{}
	var pending []*shapeState // shapes to search, in the order first met
	offers := make([]kept, 0, len(o.Offers))
	nets := map[[2]string]float64{}
	notEst := map[string]*NotEstimated{}
	accs := map[string]catalog.Accelerator{}
	lim := searchLimits{maxNodes: o.MaxNodes, deadline: o.Deadline.Seconds()}
	wantOD, wantSpot, wantRes := capacityWanted(o.Capacity)
	var short struct {
		need  float64
		sh    shape
		it    string
		plan  Plan
		found bool
	}
	var prev *shapeState       // consecutive offers usually share a shape
	var prevOffer *model.Offer // the offer prev was found for
	nQuotes := 0               // quotes step 4 makes, at most
	keep := func(of *model.Offer, st *shapeState, isSpot, hasRes bool, resDisc [2]float64) {
		offers = append(offers, kept{of: of, st: st, isSpot: isSpot, hasRes: hasRes, resDisc: resDisc})
		if isSpot || wantOD {
			nQuotes++
		}
		if !isSpot && wantRes && hasRes && o.ReservedTerm != "none" && o.PricePerGPUHour <= 0 {
			nQuotes++ // its derived reserved row
		}
	}
	for i := range o.Offers {
		of := &o.Offers[i]
		if !o.matches(of) {
			continue
		}
		isSpot := of.CapacityType == model.Spot
		resDisc, hasRes := reservedDiscounts[of.Provider]
		if isSpot && !wantSpot || !isSpot && !wantOD && !(wantRes && hasRes && o.ReservedTerm != "none") {
			continue
		}
		res.Offers++
		if g := of.GPU; len(g) >= 4 && strings.EqualFold(g[:4], "tpu-") { // without ToLower's copy per offer
			noteNotEstimated(notEst, of.GPU, "TPU slices run XLA, whose memory layout and parallelism this model does not cover")
			continue
		}
		// An offer of the previous offer's instance type (another region
		// or capacity type: about half of them) has its shape.
		if last := prevOffer; last != nil && prev != nil && of.InstanceType == last.InstanceType && of.Provider == last.Provider &&
			of.GPU == last.GPU && of.GPUCount == last.GPUCount && of.GPUMemory == last.GPUMemory && of.Memory == last.Memory && of.Interconnect == last.Interconnect {
			if !prev.ok {
				noteNotEstimated(notEst, of.GPU, prev.reason)
				continue
			}
			keep(of, prev, isSpot, hasRes, resDisc)
			continue
		}
		prevOffer = nil
		acc, ok := accs[of.GPU]
		if !ok {
			if acc, ok = o.Accelerator(of.GPU); !ok {
				noteNotEstimated(notEst, of.GPU, "no spec entry in the catalog")
				continue
			}
			accs[of.GPU] = acc
		}
		nk := [2]string{of.Provider, of.InstanceType}
		net, ok := nets[nk]
		if !ok {
			net = networkGbps(of.Provider, of.InstanceType)
			nets[nk] = net
		}
		capacity := float64(of.GPUMemory)
		if capacity == 0 {
			capacity = float64(acc.Memory)
		}
		capacity *= usableMemory
		sh := shape{gpu: of.GPU, perNode: of.GPUCount, capacity: capacity, link: of.Interconnect, hostMem: float64(of.Memory), networkGbps: net}
		st := prev
		if st == nil || st.sh != sh {
			if st, ok = shapes[sh]; !ok {
				st = &shapeState{sh: sh, firstIT: of.InstanceType}
				shapes[sh] = st
				hw, reason, hwOK := newHardware(&w, acc, o.Calibration)
				if !hwOK {
					st.reason = reason
				} else {
					w.applyMeasured(&hw, o.MeasuredTFLOPS, o.MeasuredTokensPerSecond)
					hw.intra, hw.pcie = linkRate(acc, sh.link)
					hw.inter = sh.networkGbps / 8 * 1e9 * netEfficiency
					hw.capacity, hw.hostMem, hw.gpusPerNode = sh.capacity, sh.hostMem, sh.perNode
					hw.ckptBW, hw.restart = o.CheckpointGBs*1e9, o.Restart.Seconds()
					st.hw, st.ok = hw, true
					pending = append(pending, st)
				}
			}
			prev = st
		}
		prevOffer = of
		if !st.ok {
			noteNotEstimated(notEst, of.GPU, st.reason)
			continue
		}
		keep(of, st, isSpot, hasRes, resDisc)
	}

	// 3. Search once per shape. The searches are independent and only
	// read the workload, so they run on every core; the results are used
	// below in the order the shapes were met, so the ranking does not
	// depend on which search finished first.
	// Each worker remembers the training memory of the plans it has worked
	// out (fitMemo), which the shapes with the same GPUs per node share.
	var memos []*fitMemo
	var memosMu sync.Mutex
	perStep := w
	perStep.steps = 0
	newMemo := func() *fitMemo {
		if o.noMemo || !w.Task.Training() {
			return nil
		}
		m := getFitMemo(&perStep)
		memosMu.Lock()
		memos = append(memos, m)
		memosMu.Unlock()
		return m
	}
	parallel(len(pending), newMemo, func(memo *fitMemo, i int) {
		st := pending[i]
		if w.Task.Training() {
			st.sr = w.searchTraining(st.sh, &st.hw, lim, memo)
		} else {
			st.sr = w.searchServing(st.sh, &st.hw)
		}
	})
	for _, m := range memos {
		putFitMemo(m)
	}
	for _, st := range pending {
		if len(st.sr.plans) == 0 && (!short.found || st.sr.shortfall < short.need) {
			short.need, short.sh, short.it, short.plan, short.found = st.sr.shortfall, st.sh, st.firstIT, st.sr.shortfallPlan, true
		}
	}

	// 4. Cost each offer with its shape's plans.
	qb := getQuotes(nQuotes)
	defer putQuotes(qb)
	quotes := qb.q
	for _, k := range offers {
		of, st := k.of, k.st
		if len(st.sr.plans) == 0 {
			continue
		}
		price := of.PricePerHour
		if o.PricePerGPUHour > 0 {
			price = o.PricePerGPUHour * float64(of.GPUCount)
		}
		if k.isSpot || wantOD {
			quotes = append(quotes, w.quote(of, string(of.CapacityType), price, false, &st.sr, o))
		}
		if !k.isSpot && wantRes && k.hasRes && o.ReservedTerm != "none" && o.PricePerGPUHour <= 0 {
			label := Reserved1y
			if term == 1 {
				label = Reserved3y
			}
			quotes = append(quotes, w.quote(of, label, of.PricePerHour*(1-k.resDisc[term]), true, &st.sr, o))
		}
	}

	// 5. Sort the quotes, then build rows for those returned only.
	// Sorting positions moves 4 bytes per swap rather than a whole quote.
	order := make([]int32, len(quotes))
	for i := range order {
		order[i] = int32(i)
	}
	less := compareQuotes(w.Task.Training())
	res.Ranked = len(quotes)
	order = smallest(order, o.Limit, func(a, b int32) int { return less(&quotes[a], &quotes[b]) })
	res.Rows = make([]Row, 0, len(order))
	for _, i := range order {
		res.Rows = append(res.Rows, w.buildRow(&quotes[i], o))
	}
	qb.q = quotes
	for _, ne := range notEst {
		res.NotEstimated = append(res.NotEstimated, *ne)
	}
	slices.SortFunc(res.NotEstimated, func(a, b NotEstimated) int { return strings.Compare(a.GPU, b.GPU) })
	if res.Ranked == 0 && short.found && math.IsInf(short.need, 1) {
		res.Shortfall = &Shortfall{GPU: short.sh.gpu, InstanceType: short.it,
			Message: fmt.Sprintf("no offer matches the pinned plan (%s): pinned GPUs must be whole nodes of an offer, and tp, pp, dp and cp must multiply to them", w.Pin.describe())}
	} else if res.Ranked == 0 && short.found {
		s := &Shortfall{GPU: short.sh.gpu, InstanceType: short.it, Plan: short.plan.String(),
			ShortBytes: int64(math.Ceil(short.need)), CapacityBytes: int64(short.sh.capacity)}
		s.Message = fmt.Sprintf("fits nowhere: the closest is %d×%s (%s) with %s, short by %.1f GiB per GPU of %.0f GiB; try more nodes (--max-nodes), a smaller sequence or batch, LoRA/QLoRA, or a lower precision",
			short.plan.GPUs(), short.sh.gpu, short.it, s.Plan, short.need/gib, short.sh.capacity/gib)
		res.Shortfall = s
	}
	return res, nil
}

func noteNotEstimated(m map[string]*NotEstimated, gpu, reason string) {
	if ne, ok := m[gpu]; ok {
		ne.Offers++
		return
	}
	m[gpu] = &NotEstimated{GPU: gpu, Offers: 1, Reason: reason}
}

func capacityWanted(cs []string) (od, spot, reserved bool) {
	if len(cs) == 0 {
		return true, true, true
	}
	for _, c := range cs {
		switch strings.ToLower(c) {
		case string(model.OnDemand):
			od = true
		case string(model.Spot):
			spot = true
		case "reserved":
			reserved = true
		}
	}
	return od, spot, reserved
}

func (o *Options) matches(of *model.Offer) bool {
	if len(o.GPUs) > 0 && !slices.ContainsFunc(o.GPUs, func(g string) bool { return strings.EqualFold(g, of.GPU) }) {
		return false
	}
	if len(o.Providers) > 0 && !slices.ContainsFunc(o.Providers, func(p string) bool { return strings.EqualFold(p, of.Provider) }) {
		return false
	}
	if len(o.Regions) > 0 && !slices.ContainsFunc(o.Regions, func(p string) bool { ok, _ := path.Match(p, of.Region); return ok }) {
		return false
	}
	if len(o.InstanceTypes) > 0 && !slices.ContainsFunc(o.InstanceTypes, func(p string) bool { ok, _ := path.Match(p, of.InstanceType); return ok }) {
		return false
	}
	return true
}

// quoteBuf is a ranking's quotes (about 8,000, 0.8 MB for the whole
// catalog), kept in quoteBufs between rankings so that each does not
// allocate and clear them anew.
type quoteBuf struct{ q []quote }

var quoteBufs = sync.Pool{New: func() any { return new(quoteBuf) }}

// getQuotes takes an empty buffer with room for n quotes from the pool.
func getQuotes(n int) *quoteBuf {
	b := quoteBufs.Get().(*quoteBuf)
	if cap(b.q) < n {
		b.q = make([]quote, 0, n)
	}
	return b
}

// putQuotes clears the buffer's quotes (they point into the ranking's
// offers and searches) and returns it to the pool.
func putQuotes(b *quoteBuf) {
	clear(b.q)
	b.q = b.q[:0]
	quoteBufs.Put(b)
}

// quote is one offer priced with its best plan: the numbers ranking
// needs, without the strings of a Row (which only returned rows get).
type quote struct {
	offer       *model.Offer
	label       string
	price       float64
	derived     bool
	sr          *searchResult
	plan        int // index into sr.plans
	cost, wall  float64
	perM        float64
	overhead    float64
	tau         float64
	meets       bool
	training    bool
	costPerHour float64
	throughput  float64
	instances   int
	spot        bool
}

// quote prices one offer with each of its shape's plans (one per node
// count) and keeps the cheapest.
func (w *workload) quote(of *model.Offer, label string, price float64, derived bool, sr *searchResult, o Options) quote {
	q := quote{offer: of, label: label, price: price, derived: derived, sr: sr, training: w.Task.Training(),
		spot: of.CapacityType == model.Spot && !derived, cost: math.Inf(1)}
	for i := range sr.plans {
		c := &sr.plans[i]
		var wall, cost, overhead, tau float64
		meets := true
		if q.training {
			wall = c.timing.Seconds
			if q.spot && of.InterruptionRate > 0 {
				wall, tau = youngDaly(c.timing.Seconds, float64(c.plan.Nodes)*of.InterruptionRate, c.ckptBytes/(float64(c.plan.Nodes)*o.CheckpointGBs*1e9), o.Restart.Seconds())
				overhead = wall/c.timing.Seconds - 1
			}
			cost = price * float64(c.plan.Nodes) * wall / 3600
			meets = o.Deadline <= 0 || wall <= o.Deadline.Seconds()
		} else {
			perHour := price * float64(c.instances)
			if q.spot && of.InterruptionRate > 0 {
				// A lost replica is down for the restart time.
				overhead = of.InterruptionRate * o.Restart.Hours()
			}
			cost = perHour * (1 + overhead)
			if w.Serving.TotalTokens > 0 {
				wall = w.Serving.TotalTokens / c.throughput * (1 + overhead)
				cost = perHour * wall / 3600
			}
			meets = !c.missesSLO
		}
		if (meets && !q.meets) || (meets == q.meets && cost < q.cost) {
			q.plan, q.cost, q.wall, q.overhead, q.tau, q.meets = i, cost, wall, overhead, tau, meets
		}
	}
	c := &sr.plans[q.plan]
	q.costPerHour = price * float64(c.plan.Nodes)
	if !q.training {
		q.instances, q.throughput = c.instances, c.throughput
		q.costPerHour = price * float64(c.instances) * (1 + q.overhead)
		q.perM = q.costPerHour / (c.throughput * 3600) * 1e6
		if w.Serving.TotalTokens <= 0 {
			q.cost = 0
		}
	}
	return q
}

// buildRow turns a quote into a Row.
func (w *workload) buildRow(q *quote, o Options) Row {
	of, c := q.offer, &q.sr.plans[q.plan]
	row := Row{Provider: of.Provider, Region: of.Region, Zone: of.Zone, InstanceType: of.InstanceType, GPU: of.GPU,
		GPUsPerNode: of.GPUCount, Capacity: q.label, PricePerHour: q.price, Derived: q.derived,
		Nodes: c.plan.Nodes, GPUs: c.plan.GPUs(), Plan: c.plan, PlanText: c.plan.String(),
		MeetsTarget: q.meets, SpotOverhead: q.overhead, CostPerHour: q.costPerHour,
		CheckpointEvery: model.Duration(time.Duration(q.tau * float64(time.Second))),
		MarginBytes:     int64(math.Floor(q.sr.hw.capacity - c.mem.total())),
		Time:            model.Duration(time.Duration(q.wall * float64(time.Second))),
		Hours:           q.wall / 3600,
		Cost:            q.cost,
	}
	if !q.training {
		row.TokensPerSecond, row.PerMTokens = q.throughput, q.perM
	}
	row.Assumptions = append(row.Assumptions, q.sr.hw.notes...)
	if q.derived {
		row.Assumptions = append(row.Assumptions, fmt.Sprintf("reserved price derived: %s on-demand less the provider's published %s discount; a commitment is paid for its whole term", of.Provider, strings.TrimPrefix(q.label, "reserved-")))
	}
	if q.spot && of.InterruptionRate > 0 {
		row.Assumptions = append(row.Assumptions, fmt.Sprintf("spot: %.3g interruptions per instance-hour, restart %s", of.InterruptionRate, o.Restart))
		if q.overhead > 1 {
			row.Assumptions = append(row.Assumptions, "spot: interruptions more than double the time; prefer on-demand")
		}
	}
	if !q.meets {
		if q.training {
			row.Assumptions = append(row.Assumptions, "misses the deadline even at the node limit")
		} else {
			row.Assumptions = append(row.Assumptions, "misses the latency target even at batch 1")
		}
	}
	if c.plan.Offload || c.plan.OffloadParams {
		row.Assumptions = append(row.Assumptions, "CPU offload time is a rough model (PCIe and CPU-Adam rates)")
	}
	if c.plan.cp() > 1 {
		row.Assumptions = append(row.Assumptions, "context parallelism: ring-attention communication assumed hidden behind attention compute")
	}
	if o.Explain {
		var mt terms
		if q.training {
			w.trainingMemoryTerms(c.plan, q.sr.hw.capacity, &mt)
		} else {
			w.servingMemoryTerms(c.plan.TP, c.plan.Batch, q.sr.hw.capacity, &mt)
		}
		m := c.mem.export(q.sr.hw.capacity, mt)
		t := c.timing
		t.Terms = timeTerms(&t, q.training)
		row.Memory, row.Timing = &m, &t
	}
	return row
}

// youngDaly returns the expected wall time of work seconds of computation
// under interruptions at rate per hour, with checkpoints costing delta
// seconds and each restart restart seconds, checkpointing at Young's
// optimal interval τ = √(2δM) (Young 1974 "A first order approximation to
// the optimum checkpoint interval"). The expected time is Daly's first-order
// model (Daly 2006 "A higher order estimate of the optimum checkpoint
// interval for restart dumps", §3): each interruption costs the restart and
// on average half an interval of lost work (plus the checkpoint in flight),
// W = T·(1 + δ/τ) / (1 − (R + (τ+δ)/2)/M).
func youngDaly(work, perHour, delta, restart float64) (wall, tau float64) {
	if perHour <= 0 {
		return work, 0
	}
	M := 3600 / perHour
	delta = math.Max(delta, 1)
	tau = math.Sqrt(2 * delta * M)
	if tau > work {
		// Shorter than one interval: no checkpoint; an interruption loses
		// half the run on average.
		tau = work
		denom := math.Max(0.05, 1-(restart+work/2)/M)
		return work / denom, 0
	}
	denom := math.Max(0.05, 1-(restart+(tau+delta)/2)/M)
	return work * (1 + delta/tau) / denom, tau
}

// compareQuotes orders quotes: meeting the target first, then cost
// (serving: per million tokens), time, and a fixed order over the offer's
// identity, so equal inputs give equal rankings.
func compareQuotes(training bool) func(a, b *quote) int {
	return func(a, b *quote) int {
		if a.meets != b.meets {
			if a.meets {
				return -1
			}
			return 1
		}
		var c int
		if training {
			c = cmp.Compare(a.cost, b.cost)
		} else {
			c = cmp.Compare(a.perM, b.perM)
		}
		if c != 0 {
			return c
		}
		// Each key only when the ones before it tie (cmp.Or would
		// evaluate all of them for every comparison).
		if c := cmp.Compare(a.wall, b.wall); c != 0 {
			return c
		}
		x, y := a.offer, b.offer
		if c := strings.Compare(x.Provider, y.Provider); c != 0 {
			return c
		}
		if c := strings.Compare(x.Region, y.Region); c != 0 {
			return c
		}
		if c := strings.Compare(x.Zone, y.Zone); c != 0 {
			return c
		}
		if c := strings.Compare(x.InstanceType, y.InstanceType); c != 0 {
			return c
		}
		if c := strings.Compare(x.GPU, y.GPU); c != 0 {
			return c
		}
		return cmp.Or(
			cmp.Compare(x.GPUCount, y.GPUCount),
			cmp.Compare(x.GPUMemory, y.GPUMemory),
			cmp.Compare(x.Memory, y.Memory),
			strings.Compare(a.label, b.label),
			cmp.Compare(a.price, b.price),
		)
	}
}

// parallel runs f(s, 0) … f(s, n−1) on up to GOMAXPROCS goroutines and
// waits for them all; each goroutine gets its own state s from newState.
func parallel[S any](n int, newState func() S, f func(s S, i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		s := newState()
		for i := range n {
			f(s, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newState()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(s, i)
			}
		}()
	}
	wg.Wait()
}

// smallest reorders order so that its first k entries are, in order, the k
// least under less, and returns them: the rows a ranking returns, without
// sorting the thousands it does not (a bounded max-heap, O(n log k)). The
// result is what sorting all of order and keeping k gives.
func smallest(order []int32, k int, less func(a, b int32) int) []int32 {
	if k <= 0 || k*4 >= len(order) {
		slices.SortFunc(order, less)
		if k > 0 && k < len(order) {
			order = order[:k]
		}
		return order
	}
	heap := order[:k] // a max-heap: the worst kept entry at heap[0]
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= k {
				return
			}
			j := l
			if r := l + 1; r < k && less(heap[r], heap[l]) > 0 {
				j = r
			}
			if less(heap[j], heap[i]) <= 0 {
				return
			}
			heap[i], heap[j] = heap[j], heap[i]
			i = j
		}
	}
	for i := k/2 - 1; i >= 0; i-- {
		down(i)
	}
	for _, x := range order[k:] {
		if less(x, heap[0]) < 0 {
			heap[0] = x
			down(0)
		}
	}
	slices.SortFunc(heap, less)
	return heap
}

func (w *workload) summary() Summary {
	name := w.Preset
	if name == "" {
		name = fmt.Sprintf("custom %.3gB", w.params/1e9)
	}
	s := Summary{Task: w.Task, Model: name, Parameters: w.params, ActiveParameters: w.active, Adapters: w.adapters,
		Precision: w.Precision, KVCachePerTokenBytes: int64(w.kvBytes)}
	if w.Task.Training() {
		s.Optimizer, s.SequenceLength, s.GlobalBatch, s.Tokens, s.Steps = w.Optimizer, w.SequenceLength, w.GlobalBatch, w.tokens, w.steps
		mf, _ := w.flopsPerToken(RecomputeNone)
		s.ModelFLOPs = mf * w.tokens
		switch w.Task {
		case LoRA, QLoRA:
			s.ModelStatesBytes = int64(w.params*w.Precision.bytes() + w.adapters*(8+adapterOptimBytes(w.Optimizer)))
		default:
			wb, gb, ob := trainingBytes(w.Precision, w.Optimizer)
			s.ModelStatesBytes = int64(w.params * (wb + gb + ob))
		}
		s.CheckpointBytes = int64(w.checkpointBytes())
		s.LargestLayerParams = w.largestLayer(1)
	}
	return s
}

// assumptions are the notes that hold for every row.
func (w *workload) assumptions(o Options) []string {
	var a []string
	if w.Task.Training() {
		a = append(a,
			"time = FLOPs (6·N·tokens + attention, more with recomputation) ÷ (datasheet bf16 peak × utilisation by GPU, attention kernel and model width), plus pipeline bubble and exposed data-parallel communication, ÷ goodput: hardware interruptions at Llama 3's 2.2e-5 per GPU-hour, each a restart and the work since the last checkpoint, checkpoints at Young's interval (Young 1974, Daly 2006); evaluation and data stalls not included",
			"memory: first pipeline stage; Korthikanti et al. 2022 activations with sequence parallelism under TP; ZeRO-2/3 model states and offload host memory as DeepSpeed's estimators count them; 7% allocator margin on what is allocated",
		)
		if w.arch.Experts > 0 {
			a = append(a, "MoE: FLOPs by active parameters (routed top-k + shared experts); memory by total parameters with routed experts split by expert parallelism; the all-to-all of expert parallelism per MoE layer (exposed unless overlapExpertComm); routing imbalance, token dropping and the GEMM efficiency of narrow experts are not modelled")
		}
		if w.Task == QLoRA {
			a = append(a, "QLoRA dequantisation slowdown (1.3×) is a rough figure")
		}
	} else {
		a = append(a,
			"serving: decode bound by HBM bandwidth (70% utilisation) over weights + KV cache, prefill by compute (50% utilisation); continuous batching; single-node tensor parallelism only",
			"serving: no speculative decoding, prefix caching or quantised KV unless set; $/Mtok counts output tokens",
		)
	}
	if o.PricePerGPUHour > 0 {
		a = append(a, fmt.Sprintf("price given: $%.4g per GPU-hour replaces every offer's listed price; no reserved rows", o.PricePerGPUHour))
	}
	a = append(a, "multi-node network bandwidth from a per-instance table of provider pages (the catalog has none)")
	if len(o.Calibration.GPUs) > 0 {
		names := make([]string, 0, len(o.Calibration.GPUs))
		for k := range o.Calibration.GPUs {
			names = append(names, k)
		}
		slices.Sort(names)
		a = append(a, "measured rates (gpufleet bench) used for: "+strings.Join(names, ", "))
	} else {
		a = append(a, "datasheet rates; run `gpufleet bench` on a node to use measured ones")
	}
	return a
}

// EstimateRuntime is the scheduler's and autoscaler's entry point: the
// expected time to finish a training profile (or, for serving, to produce
// Serving.TotalTokens) on gpus GPUs of one model, packed into nodes of
// perNode GPUs with the given interconnect (a catalog Interconnect
// constant; "" means NVSwitch for multi-GPU nodes). It searches plans at
// exactly that GPU count, so it answers "how long on what I have", and
// returns an error when the profile is invalid or does not fit.
func EstimateRuntime(p Profile, acc catalog.Accelerator, gpus, perNode int, interconnect string, cal Calibration) (time.Duration, error) {
	w, fe := resolve(p)
	if err := fe.Err(); err != nil {
		return 0, err
	}
	if gpus <= 0 || perNode <= 0 || gpus%perNode != 0 {
		return 0, fmt.Errorf("estimating runtime: %d GPUs do not make whole nodes of %d", gpus, perNode)
	}
	if interconnect == "" {
		interconnect = catalog.InterconnectNVSwitch
		if perNode == 1 {
			interconnect = catalog.InterconnectPCIe
		}
	}
	hw, reason, ok := newHardware(&w, acc, cal)
	if !ok {
		return 0, fmt.Errorf("estimating runtime: %s", reason)
	}
	hw.intra, hw.pcie = linkRate(acc, interconnect)
	hw.inter = 400 / 8 * 1e9 * netEfficiency
	sh := shape{gpu: acc.Name, perNode: perNode, capacity: float64(acc.Memory) * usableMemory, link: interconnect, networkGbps: 400}
	hw.capacity, hw.gpusPerNode = sh.capacity, perNode
	hw.ckptBW, hw.restart = defaultCheckpointGBs*1e9, defaultRestart.Seconds()
	nodes := gpus / perNode
	if !w.Task.Training() {
		sr := w.searchServing(sh, &hw)
		if len(sr.plans) == 0 || w.Serving.TotalTokens <= 0 {
			return 0, fmt.Errorf("estimating runtime: serving needs totalTokens and a model that fits one %s node", acc.Name)
		}
		c := sr.plans[0]
		perReplica := c.throughput / float64(c.plan.Replicas)
		replicas := max(1, gpus/c.plan.TP)
		return time.Duration(w.Serving.TotalTokens / (perReplica * float64(replicas)) * float64(time.Second)), nil
	}
	sr := searchResult{shortfall: math.Inf(1)}
	recomputes := recomputeFA
	if w.Attention == Eager {
		recomputes = recomputeEA
	}
	if c, ok := w.bestAtNodes(nodes, sh, &hw, recomputes, &sr, nil); ok {
		return time.Duration(c.timing.Seconds * float64(time.Second)), nil
	}
	return 0, fmt.Errorf("estimating runtime: the workload does not fit %d×%s (short by %.1f GiB per GPU)", gpus, acc.Name, sr.shortfall/gib)
}
