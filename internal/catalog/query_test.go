package catalog

import (
	"bytes"
	"cmp"
	"math"
	"path"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

// offerKey is the part of an offer that the query tests compare.
type offerKey struct {
	Provider, InstanceType, GPU string
	GPUCount                    int
	Region, Zone                string
	CapacityType                model.CapacityType
	PricePerHour                float64
}

func keys(offers []model.Offer) []offerKey {
	var out []offerKey
	for _, o := range offers {
		out = append(out, offerKey{o.Provider, o.InstanceType, o.GPU, o.GPUCount, o.Region, o.Zone, o.CapacityType, o.PricePerHour})
	}
	return out
}

// TestQuery checks filters and orders on the embedded data; the wanted
// offers were worked out from gpu_catalog.csv independently of this code.
func TestQuery(t *testing.T) {
	t.Parallel()
	c := mustLoad(t)
	spot, onDemand := []model.CapacityType{model.Spot}, []model.CapacityType{model.OnDemand}
	tests := map[string]struct {
		q    Query
		want []offerKey
	}{
		"offers --gpu H100 --min-gpu-memory 40Gi --gpus 8 --spot --region us-*": {
			Query{GPUs: []string{"H100"}, MinGPUMemory: 40 * model.GiB, GPUCount: 8, CapacityTypes: spot, Regions: []string{"us-*"}, Sort: SortPrice, Limit: 3},
			[]offerKey{
				{"aws", "p5.48xlarge", "H100", 8, "us-east-1", "use1-atl2-az1", model.Spot, 10.2397},
				{"aws", "p5.48xlarge", "H100", 8, "us-east-2", "use2-az1", model.Spot, 11.2543},
				{"aws", "p5.48xlarge", "H100", 8, "us-east-2", "use2-az2", model.Spot, 11.5616},
			}},
		"several models, any case, under a price cap": {
			Query{GPUs: []string{"H100", "h200", "H100"}, MaxPricePerHour: 2, Limit: 2},
			[]offerKey{
				{"gcp", "a3-highgpu-1g", "H100", 1, "europe-north1", "", model.Spot, 1.17209},
				{"azure", "Standard_NCC40ads_H100_v5", "H100", 1, "eastus2", "", model.Spot, 1.289904},
			}},
		"exact count and several region patterns": {
			Query{GPUs: []string{"a100-80gb"}, GPUCount: 4, Regions: []string{"europe-*", "*europe"}, Limit: 2},
			[]offerKey{
				{"azure", "Standard_NC96ads_A100_v4", "A100-80GB", 4, "northeurope", "", model.Spot, 3.584179},
				{"azure", "Standard_NC96ads_A100_v4", "A100-80GB", 4, "westeurope", "", model.Spot, 7.6209},
			}},
		"sort total, provider any case": {
			Query{Providers: []string{"Lambda"}, Sort: SortTotal, Limit: 2},
			[]offerKey{
				{"lambda", "gpu_1x_rtx6000", "RTX6000", 1, "asia-northeast-1", "", model.OnDemand, 0.69},
				{"lambda", "gpu_1x_rtx6000", "RTX6000", 1, "asia-northeast-2", "", model.OnDemand, 0.69},
			}},
		"sort memory, most first": {
			Query{CapacityTypes: onDemand, Sort: SortMemory, Limit: 2},
			[]offerKey{
				{"oci", "BM.GPU.MI355X.8", "MI355X", 8, "global", "", model.OnDemand, 68.8},
				{"oci", "BM.GPU.GB300.4", "GB300", 4, "global", "", model.OnDemand, 72},
			}},
		"sort gpus, most first, ties by price per GPU-hour": {
			Query{Sort: SortGPUs, Limit: 2},
			[]offerKey{
				{"gcp", "a2-megagpu-16g", "A100", 16, "europe-west4", "", model.Spot, 23.61688},
				{"gcp", "a2-megagpu-16g", "A100", 16, "us-central1", "", model.Spot, 27.34384},
			}},
		"min GPU count": {
			Query{MinGPUCount: 16, Sort: SortTotal, Limit: 1},
			[]offerKey{{"gcp", "a2-megagpu-16g", "A100", 16, "europe-west4", "", model.Spot, 23.61688}}},
		"unknown model matches nothing":   {Query{GPUs: []string{"K80"}}, nil},
		"bad region pattern matches none": {Query{Regions: []string{"us-["}}, nil},
		"reserved is not sold":            {Query{CapacityTypes: []model.CapacityType{model.Reserved}}, nil},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := gocmp.Diff(tt.want, keys(c.Query(tt.q))); diff != "" {
				t.Errorf("Query(%+v) (-want +got):\n%s", tt.q, diff)
			}
		})
	}
}

// referenceQuery is Query written plainly over Offers, for differential
// tests: no index, no early stop, a stable sort.
func referenceQuery(c *Catalog, q Query) []model.Offer {
	out := []model.Offer{}
	for _, o := range c.Offers() {
		if len(q.GPUs) > 0 && !slices.ContainsFunc(q.GPUs, func(g string) bool { return strings.ToLower(g) == strings.ToLower(o.GPU) }) ||
			q.MinGPUMemory > 0 && o.GPUMemory < q.MinGPUMemory ||
			q.GPUCount > 0 && o.GPUCount != q.GPUCount ||
			q.MinGPUCount > 0 && o.GPUCount < q.MinGPUCount ||
			len(q.Providers) > 0 && !slices.ContainsFunc(q.Providers, func(p string) bool { return strings.EqualFold(p, o.Provider) }) ||
			len(q.Regions) > 0 && !slices.ContainsFunc(q.Regions, func(p string) bool { ok, _ := path.Match(p, o.Region); return ok }) ||
			len(q.CapacityTypes) > 0 && !slices.Contains(q.CapacityTypes, o.CapacityType) ||
			q.MaxPricePerHour > 0 && o.PricePerHour > q.MaxPricePerHour {
			continue
		}
		out = append(out, o)
	}
	switch q.Sort {
	case SortTotal:
		slices.SortStableFunc(out, func(a, b model.Offer) int { return cmp.Compare(a.PricePerHour, b.PricePerHour) })
	case SortMemory:
		slices.SortStableFunc(out, func(a, b model.Offer) int { return cmp.Compare(b.GPUMemory, a.GPUMemory) })
	case SortGPUs:
		slices.SortStableFunc(out, func(a, b model.Offer) int { return cmp.Compare(b.GPUCount, a.GPUCount) })
	}
	out = out[min(max(q.Offset, 0), len(out)):]
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out
}

func TestQueryMatchesReference(t *testing.T) {
	t.Parallel()
	c := mustLoad(t)
	tests := map[string]Query{
		"everything":              {},
		"everything by memory":    {Sort: SortMemory},
		"spot us by total":        {CapacityTypes: []model.CapacityType{model.Spot}, Regions: []string{"us-*"}, Sort: SortTotal},
		"big memory by gpus":      {MinGPUMemory: 80 * model.GiB, Sort: SortGPUs, Limit: 50},
		"count and min count":     {GPUCount: 4, MinGPUCount: 2},
		"tpus":                    {GPUs: []string{"tpu-v5p-8", "TPU-V6E-256"}, Sort: SortTotal},
		"providers":               {Providers: []string{"oci", "VAST"}},
		"limit in default order":  {GPUs: []string{"L4"}, Limit: 7},
		"a page in default order": {Offset: 50, Limit: 50},
		"a page by price":         {Sort: SortPrice, Offset: 100, Limit: 25},
		"offset to the end":       {GPUs: []string{"L4"}, Offset: 3},
	}
	for name, q := range tests {
		t.Run(name, func(t *testing.T) {
			want := referenceQuery(c, q)
			got := c.Query(q)
			if diff := gocmp.Diff(want, got); diff != "" {
				t.Errorf("Query(%+v) (-want +got):\n%s", q, diff)
			}
			if len(got) == 0 {
				t.Errorf("Query(%+v) matched nothing; the case tests nothing", q)
			}
		})
	}
}

func FuzzQuery(f *testing.F) {
	c := mustLoad(f)
	f.Add("H100", int64(40*model.GiB), 8, 0, "", "us-*", "spot", 0.0, "price", 0)
	f.Add("", int64(0), 0, 0, "", "", "", 0.0, "", 0)
	f.Add("tpu-v4-8", int64(0), 1, 1, "gcp", "*", "on-demand", 100.0, "total", 3)
	f.Add("a100", int64(-1), -2, 4, "AWS", "[", "reserved", math.NaN(), "memory", -1)
	f.Add("l4", int64(24*model.GiB), 0, 2, "azure", "*europe", "", 5.5, "gpus", 10)
	f.Fuzz(func(t *testing.T, gpu string, minMemory int64, count, minCount int, provider, region, capacity string, maxPrice float64, sort string, limit int) {
		q := Query{MinGPUMemory: model.Bytes(minMemory), GPUCount: count, MinGPUCount: minCount,
			MaxPricePerHour: maxPrice, Sort: sort, Limit: limit}
		if gpu != "" {
			q.GPUs = []string{gpu}
		}
		if provider != "" {
			q.Providers = []string{provider}
		}
		if region != "" {
			q.Regions = []string{region}
		}
		if capacity != "" {
			q.CapacityTypes = []model.CapacityType{model.CapacityType(capacity)}
		}
		got := c.Query(q)
		if diff := gocmp.Diff(referenceQuery(c, q), got); diff != "" {
			t.Fatalf("Query(%+v) (-reference +got):\n%s", q, diff)
		}
		// The reference could share a bug; check the promises directly too.
		if q.Limit > 0 && len(got) > q.Limit {
			t.Fatalf("Query(%+v) returned %d offers, more than the limit", q, len(got))
		}
		order := sortKey(q.Sort)
		for i, o := range got {
			if q.MinGPUMemory > 0 && o.GPUMemory < q.MinGPUMemory || q.GPUCount > 0 && o.GPUCount != q.GPUCount ||
				q.MaxPricePerHour > 0 && o.PricePerHour > q.MaxPricePerHour {
				t.Fatalf("Query(%+v) returned %+v, which fails a filter", q, o)
			}
			if i == 0 {
				continue
			}
			prev := &got[i-1]
			if c := compareOffers(prev, &o); order == nil && c >= 0 || order != nil && (order(prev, &o) > 0 || order(prev, &o) == 0 && c >= 0) {
				t.Fatalf("Query(%+v): offers %d and %d out of order", q, i-1, i)
			}
		}
	})
}

func TestQueryValidate(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		q    Query
		want model.FieldErrors
	}{
		"zero value": {Query{}, nil},
		"full valid query": {Query{GPUs: []string{"H100"}, MinGPUMemory: 40 * model.GiB, GPUCount: 8, MinGPUCount: 8,
			Providers: []string{"aws"}, Regions: []string{"us-*"}, CapacityTypes: []model.CapacityType{model.Spot, model.OnDemand},
			MaxPricePerHour: 40, Sort: SortGPUs, Limit: 10}, nil},
		"every field wrong": {Query{GPUs: []string{"H100", " "}, MinGPUMemory: -1, GPUCount: -1, MinGPUCount: -2,
			Providers: []string{""}, Regions: []string{"us-*", "us-["}, CapacityTypes: []model.CapacityType{model.Owned},
			MaxPricePerHour: -1, Sort: "cheapest", Limit: -1},
			model.FieldErrors{
				{Path: "gpus[1]", Message: "must not be empty"},
				{Path: "minGPUMemory", Message: "must not be negative"},
				{Path: "gpuCount", Message: "must not be negative"},
				{Path: "minGPUCount", Message: "must not be negative"},
				{Path: "providers[0]", Message: "must not be empty"},
				{Path: "regions[1]", Message: `"us-[" is not a shell pattern such as us-*`},
				{Path: "capacityTypes[0]", Message: `"owned" is not on-demand or spot, the types the catalog sells`},
				{Path: "maxPricePerHour", Message: "must be a non-negative number"},
				{Path: "sort", Message: `"cheapest" is not one of price, total, memory, gpus`},
				{Path: "limit", Message: "must not be negative"},
			}},
		"min count above exact count": {Query{GPUCount: 4, MinGPUCount: 8},
			model.FieldErrors{{Path: "minGPUCount", Message: "8 exceeds gpuCount 4, so nothing can match"}}},
		"price not a number": {Query{MaxPricePerHour: math.Inf(1)},
			model.FieldErrors{{Path: "maxPricePerHour", Message: "must be a non-negative number"}}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := gocmp.Diff(tt.want, tt.q.Validate()); diff != "" {
				t.Errorf("Validate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTable(t *testing.T) {
	t.Parallel()
	offers := []model.Offer{
		{Provider: "aws", Region: "us-east-1", Zone: "use1-az2", InstanceType: "p5.48xlarge", GPU: "H100", GPUCount: 8,
			GPUMemory: 80 * model.GiB, VCPUs: 192, Memory: 2048 * model.GiB, CapacityType: model.Spot, PricePerHour: 19.2531},
		{Provider: "gcp", Region: "us-central1", InstanceType: "TPU-VM", GPU: "tpu-v5litepod-8", GPUCount: 1,
			CapacityType: model.OnDemand, PricePerHour: 9.6},
		{Provider: "aws", Region: "us-east-1", InstanceType: "g5.xlarge", GPU: "A10G", GPUCount: 1,
			GPUMemory: gibToBytes(22.35), VCPUs: 4, Memory: 16 * model.GiB, CapacityType: model.OnDemand, PricePerHour: 1.006},
	}
	want := `GPU              QTY  CLOUD  INSTANCE_TYPE  GPU_MEM   vCPUs  HOST_MEM  $/GPU-HR  $/HR     CAPACITY   REGION       ZONE
H100             8    aws    p5.48xlarge    80GiB     192    2048GiB   $2.407    $19.253  spot       us-east-1    use1-az2
tpu-v5litepod-8  1    gcp    TPU-VM         -         -      -         $9.600    $9.600   on-demand  us-central1  -
A10G             1    aws    g5.xlarge      22.35GiB  4      16GiB     $1.006    $1.006   on-demand  us-east-1    -
`
	var buf bytes.Buffer
	if err := Table(&buf, offers); err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("Table (-want +got):\n%s", diff)
	}
}

// TestQueryWith: owned machines join the catalog's offers at their
// declared price, in the query's order, and pass the same filters.
func TestQueryWith(t *testing.T) {
	t.Parallel()
	c := mustLoad(t)
	owned := []model.Offer{
		{Provider: "static", Region: "owned", InstanceType: "rack-a", GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, CapacityType: model.Owned, PricePerHour: 0.8},
		{Provider: "static", Region: "owned", InstanceType: "rack-b", GPU: "L4", GPUCount: 1, GPUMemory: 24 * model.GiB, CapacityType: model.Owned, PricePerHour: 0.1},
	}
	got := keys(c.QueryWith(Query{GPUs: []string{"h100"}, GPUCount: 8, Sort: SortPrice, Limit: 2}, owned))
	want := []offerKey{{"static", "rack-a", "H100", 8, "owned", "", model.Owned, 0.8}}
	want = append(want, keys(c.Query(Query{GPUs: []string{"H100"}, GPUCount: 8, Sort: SortPrice, Limit: 1}))...)
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("owned H100 first (-want +got):\n%s", diff)
	}
	if got := c.QueryWith(Query{Regions: []string{"us-*"}, GPUs: []string{"L4"}, Limit: 3}, owned); slices.ContainsFunc(got, func(o model.Offer) bool { return o.Provider == "static" }) {
		t.Errorf("an owned machine outside the regions asked for: %v", keys(got))
	}
	if got := c.QueryWith(Query{CapacityTypes: []model.CapacityType{model.Spot}, GPUs: []string{"L4"}, Limit: 3}, owned); slices.ContainsFunc(got, func(o model.Offer) bool { return o.Provider == "static" }) {
		t.Errorf("an owned machine among spot offers: %v", keys(got))
	}
}

// TestPage: pages of a query tile its whole answer, and total counts it.
func TestPage(t *testing.T) {
	t.Parallel()
	c := mustLoad(t)
	owned := []model.Offer{{Provider: "static", Region: "lab", InstanceType: "box", GPU: "H100", GPUCount: 8, CapacityType: model.OnDemand, PricePerHour: 9}}
	q := Query{GPUs: []string{"H100", "L4"}, Sort: SortPrice}
	want := c.QueryWith(q, owned)
	if len(want) < 120 {
		t.Fatalf("the query matches %d offers; too few to page", len(want))
	}
	var got []model.Offer
	for offset := 0; ; offset += 50 {
		q.Offset, q.Limit = offset, 50
		page, total := c.Page(q, owned)
		if total != len(want) {
			t.Fatalf("page at %d: total %d, want %d", offset, total, len(want))
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("pages joined differ from the whole answer (-want +got):\n%s", diff)
	}
	if page, total := c.Page(Query{GPUs: []string{"H100"}, Offset: 1 << 20, Limit: 5}, nil); len(page) != 0 || total == 0 {
		t.Errorf("a page past the end = %d offers of %d, want none of many", len(page), total)
	}
}

// TestModels: each model's summary agrees with a query for that model
// alone: its offer count, providers, memory and both price ranges.
func TestModels(t *testing.T) {
	t.Parallel()
	c := mustLoad(t)
	models := c.Models(Query{Sort: SortTotal, Limit: 3}) // sort and limit do not apply
	if len(models) < 10 {
		t.Fatalf("%d models in the whole catalog", len(models))
	}
	if !slices.IsSortedFunc(models, func(a, b GPUModel) int { return strings.Compare(strings.ToLower(a.GPU), strings.ToLower(b.GPU)) }) {
		t.Error("models are not sorted by name")
	}
	total := 0
	for _, m := range models {
		total += m.Offers
		offers := c.Query(Query{GPUs: []string{m.GPU}})
		want := GPUModel{GPU: m.GPU, Vendor: m.Vendor, Offers: len(offers), MinGPUMemory: math.MaxInt64, TPU: strings.HasPrefix(m.GPU, "tpu-")}
		for _, o := range offers {
			want.GPUMemory, want.MinGPUMemory = max(want.GPUMemory, o.GPUMemory), min(want.MinGPUMemory, o.GPUMemory)
			if !slices.Contains(want.Providers, o.Provider) {
				want.Providers = append(want.Providers, o.Provider)
			}
			r := &want.OnDemand
			if o.CapacityType == model.Spot {
				r = &want.Spot
			}
			if *r == nil {
				*r = &PriceRange{Min: math.Inf(1), Max: math.Inf(-1)}
			}
			(*r).Min, (*r).Max = math.Min((*r).Min, o.PricePerGPUHour()), math.Max((*r).Max, o.PricePerGPUHour())
		}
		slices.Sort(want.Providers)
		if diff := gocmp.Diff(want, m); diff != "" {
			t.Errorf("model %s (-want +got):\n%s", m.GPU, diff)
		}
	}
	if all := len(c.Offers()); total != all {
		t.Errorf("models count %d offers, the catalog has %d", total, all)
	}
	h100 := c.Models(Query{GPUs: []string{"h100"}, CapacityTypes: []model.CapacityType{model.Spot}})
	if len(h100) != 1 || h100[0].Spot == nil || h100[0].OnDemand != nil || h100[0].GPUMemory != 80*model.GiB || h100[0].MinGPUMemory != 80*model.GiB {
		t.Errorf("H100 spot summary = %+v, want one model, 80GiB, spot prices only", h100)
	}
}
