package catalog

import (
	"math"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func mustLoad(t testing.TB) *Catalog {
	t.Helper()
	c, err := Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

// findOffer returns the one offer with the identifying fields of like:
// provider, instance type, GPU, region, zone and capacity type.
func findOffer(t *testing.T, c *Catalog, like model.Offer) model.Offer {
	t.Helper()
	var found []model.Offer
	for _, o := range c.Offers() {
		if o.Provider == like.Provider && o.InstanceType == like.InstanceType && o.GPU == like.GPU &&
			o.Region == like.Region && o.Zone == like.Zone && o.CapacityType == like.CapacityType {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d offers like %+v, want 1", len(found), like)
	}
	return found[0]
}

// TestEmbeddedFacts checks offers built from the embedded data against
// gpu_catalog.csv rows, copied here by hand.
func TestEmbeddedFacts(t *testing.T) {
	t.Parallel()
	c := mustLoad(t)
	p5 := model.Offer{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", GPU: "H100", GPUCount: 8,
		GPUMemory: 80 * model.GiB, VCPUs: 192, Memory: 2048 * model.GiB, Interconnect: InterconnectNVSwitch}
	with := func(o model.Offer, zone string, ct model.CapacityType, price, rate float64) model.Offer {
		o.Zone, o.CapacityType, o.PricePerHour, o.InterruptionRate = zone, ct, price, rate
		return o
	}
	tests := map[string]model.Offer{
		"aws p5.48xlarge on-demand is 8xH100 at $55.04":     with(p5, "use1-az4", model.OnDemand, 55.04, 0),
		"aws p5.48xlarge spot uses its Advisor band (>20%)": with(p5, "use1-az2", model.Spot, 19.2531, interruptionRate(4)),
		"gcp a3-highgpu-8g joins host and GPU prices": {Provider: "gcp", Region: "us-central1", InstanceType: "a3-highgpu-8g",
			GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, VCPUs: 208, Memory: 1872 * model.GiB,
			CapacityType: model.OnDemand, PricePerHour: 43.06615, Interconnect: InterconnectNVSwitch},
		"azure spot uses the default band": {Provider: "azure", Region: "eastus", InstanceType: "Standard_ND96isr_H100_v5",
			GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, VCPUs: 96, Memory: 1900 * model.GiB,
			CapacityType: model.Spot, PricePerHour: 18.169536, InterruptionRate: interruptionRate(defaultSpotBand),
			Interconnect: InterconnectNVSwitch},
		"lambda gpu_8x_h100_sxm5": {Provider: "lambda", Region: "us-east-1", InstanceType: "gpu_8x_h100_sxm5",
			GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, VCPUs: 208, Memory: 1800 * model.GiB,
			CapacityType: model.OnDemand, PricePerHour: 31.92, Interconnect: InterconnectNVSwitch},
		"oci prices are global": {Provider: "oci", Region: "global", InstanceType: "BM.GPU.H100.8",
			GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, VCPUs: 224, Memory: 2048 * model.GiB,
			CapacityType: model.OnDemand, PricePerHour: 80, Interconnect: InterconnectNVSwitch},
		"vast reports usable memory": {Provider: "vast", Region: "Vietnam, VN, AS", InstanceType: "8x-H100_SXM-32-65536",
			GPU: "H100", GPUCount: 8, GPUMemory: gibToBytes(79.65), VCPUs: 32, Memory: 64 * model.GiB,
			CapacityType: model.OnDemand, PricePerHour: 14.94, Interconnect: InterconnectNVSwitch},
		"tpu slice is one device without host figures": {Provider: "gcp", Region: "us-central1", InstanceType: "TPU-VM",
			GPU: "tpu-v5litepod-8", GPUCount: 1, CapacityType: model.Spot, PricePerHour: 2.05738,
			InterruptionRate: interruptionRate(defaultSpotBand), Interconnect: InterconnectICI},
		"aws type missing from the Advisor uses the default band": {Provider: "aws", Region: "us-east-1", Zone: "use1-az6",
			InstanceType: "p6-b200.48xlarge", GPU: "B200", GPUCount: 8, GPUMemory: gibToBytes(179.06), VCPUs: 192,
			Memory: 2048 * model.GiB, CapacityType: model.Spot, PricePerHour: 21.0148,
			InterruptionRate: interruptionRate(defaultSpotBand), Interconnect: InterconnectNVSwitch},
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(want, findOffer(t, c, want)); diff != "" {
				t.Errorf("offer (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEmbeddedRows(t *testing.T) {
	t.Parallel()
	rows, err := decodeRows(catalogCSVGz)
	if err != nil {
		t.Fatal(err)
	}
	// gpu_catalog.csv has 3,667 rows (shared/data/README.md).
	if len(rows) != 3667 {
		t.Errorf("%d embedded rows, want 3667", len(rows))
	}
	var want, fractional int
	for _, r := range rows {
		if r.gpuCount != math.Trunc(r.gpuCount) {
			fractional++
			continue
		}
		if r.hasPrice {
			want++
		}
		if r.hasSpotPrice {
			want++
		}
	}
	// Azure's NVads A10 v5 partitions: 1/6, 1/3 and 1/2 of an A10.
	if fractional != 108 {
		t.Errorf("%d fractional-GPU rows, want 108", fractional)
	}
	if got := len(mustLoad(t).Offers()); got != want {
		t.Errorf("%d offers, want %d: one per row and price", got, want)
	}
}

func TestOffersInvariants(t *testing.T) {
	t.Parallel()
	offers := mustLoad(t).Offers()
	for i, o := range offers {
		switch {
		case o.GPUCount < 1:
			t.Errorf("%+v: GPU count < 1", o)
		case !(o.PricePerHour > 0):
			t.Errorf("%+v: price not positive", o)
		case o.Interconnect == "":
			t.Errorf("%+v: no interconnect rule matches", o)
		case o.CapacityType == model.OnDemand && o.InterruptionRate != 0:
			t.Errorf("%+v: on-demand offer with an interruption rate", o)
		case o.CapacityType == model.Spot && !(o.InterruptionRate > 0):
			t.Errorf("%+v: spot offer without an interruption rate", o)
		case o.CapacityType != model.OnDemand && o.CapacityType != model.Spot:
			t.Errorf("%+v: capacity type", o)
		case i > 0 && compareOffers(&offers[i-1], &o) >= 0:
			t.Errorf("offers %d and %d are not in strict default order:\n%+v\n%+v", i-1, i, offers[i-1], o)
		}
	}
}

func TestInterconnect(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ provider, instanceType, gpu, want string }{
		"aws p5 single GPU names its family": {"aws", "p5.4xlarge", "H100", InterconnectNVSwitch},
		"aws p3 cube-mesh":                   {"aws", "p3.16xlarge", "V100", InterconnectNVLink},
		"aws g6":                             {"aws", "g6.12xlarge", "L4", InterconnectPCIe},
		"gcp n1 with V100":                   {"gcp", "n1-highmem-8", "V100", InterconnectNVLink},
		"gcp n1 with T4":                     {"gcp", "n1-highmem-8", "T4", InterconnectPCIe},
		"gcp TPU":                            {"gcp", "TPU-VM", "tpu-v4-8", InterconnectICI},
		"azure MI300X":                       {"azure", "Standard_ND96isr_MI300X_v5", "MI300X", InterconnectInfinityFabric},
		"azure ND H100":                      {"azure", "Standard_ND96isr_H100_v5", "H100", InterconnectNVSwitch},
		"azure NC A100 PCIe":                 {"azure", "Standard_NC96ads_A100_v4", "A100-80GB", InterconnectPCIe},
		"oci A100 is not A10":                {"oci", "BM.GPU.A100-v2.8", "A100-80GB", InterconnectNVSwitch},
		"oci A10":                            {"oci", "BM.GPU.A10.4", "A10", InterconnectPCIe},
		"oci V100":                           {"oci", "VM.GPU3.4", "V100", InterconnectNVLink},
		"lambda sxm":                         {"lambda", "gpu_1x_a100_sxm4", "A100", InterconnectNVSwitch},
		"lambda pcie":                        {"lambda", "gpu_1x_a100", "A100", InterconnectPCIe},
		"vast SXM":                           {"vast", "8x-H100_SXM-32-65536", "H100", InterconnectNVSwitch},
		"unknown provider":                   {"nebius", "gpu-h100-sxm", "H100", ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := interconnect(tt.provider, tt.instanceType, tt.gpu); got != tt.want {
				t.Errorf("interconnect(%q, %q, %q) = %q, want %q", tt.provider, tt.instanceType, tt.gpu, got, tt.want)
			}
		})
	}
}

func TestInterconnectRulePatterns(t *testing.T) {
	t.Parallel()
	for _, r := range interconnectRules {
		if _, err := path.Match(r.pattern, ""); err != nil {
			t.Errorf("rule %+v: %v", r, err)
		}
	}
}

func TestInstanceTypes(t *testing.T) {
	t.Parallel()
	types := mustLoad(t).InstanceTypes()
	if !slices.IsSortedFunc(types, compareTypes) {
		t.Error("instance types are not sorted")
	}
	for _, it := range types {
		if it.Interconnect == "" || it.GPUCount < 1 {
			t.Errorf("%+v: want an interconnect and at least one GPU", it)
		}
	}
	want := InstanceType{Provider: "aws", Name: "p5.4xlarge", GPU: "H100", GPUCount: 1, VCPUs: 16,
		Memory: 256 * model.GiB, GPUMemory: 80 * model.GiB, Interconnect: InterconnectNVSwitch}
	i := slices.IndexFunc(types, func(it InstanceType) bool { return it.Provider == "aws" && it.Name == "p5.4xlarge" })
	if i < 0 {
		t.Fatal("no p5.4xlarge")
	}
	if diff := cmp.Diff(want, types[i]); diff != "" {
		t.Errorf("p5.4xlarge (-want +got):\n%s", diff)
	}
}

func TestAccelerator(t *testing.T) {
	t.Parallel()
	c := mustLoad(t)
	type view struct {
		Name, Variant string
		Memory        model.Bytes
		BF16          float64
	}
	tests := map[string]struct {
		name   string
		want   view
		wantOK bool
	}{
		"primary variant":       {"h100", view{"H100", "SXM5 80GB", 80 * model.GiB, 989}, true},
		"quadro, not ada":       {"RTX6000", view{"RTX6000", "Quadro RTX 6000 24GB (Turing)", 24 * model.GiB, 0}, true},
		"tpu slice to its chip": {"tpu-v5litepod-8", view{"tpu-v5litepod", "TPU v5e chip", 16 * model.GiB, 197}, true},
		"tpu slice, any case":   {"TPU-V4-1024", view{"tpu-v4", "TPU v4 chip", 32 * model.GiB, 275}, true},
		"tpu chip by name":      {"tpu-v6e", view{"tpu-v6e", "TPU v6e (Trillium) chip", 32 * model.GiB, 918}, true},
		"not in the catalog":    {"Trainium2", view{"Trainium2", "chip", 96 * model.GiB, 667}, true},
		"unknown":               {"H1000", view{}, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			a, ok := c.Accelerator(tt.name)
			got := view{a.Name, a.Variant, a.Memory, a.BF16TFLOPS}
			if diff := cmp.Diff(tt.want, got); diff != "" || ok != tt.wantOK {
				t.Errorf("Accelerator(%q) ok=%v, want %v; (-want +got):\n%s", tt.name, ok, tt.wantOK, diff)
			}
		})
	}
}

func TestEveryCatalogGPUHasASpec(t *testing.T) {
	t.Parallel()
	c := mustLoad(t)
	for _, name := range c.gpuNames {
		if _, ok := c.Accelerator(name); !ok {
			t.Errorf("catalog accelerator %q has no spec entry", name)
		}
	}
}

func TestAccelerators(t *testing.T) {
	t.Parallel()
	accs := mustLoad(t).Accelerators()
	if !slices.IsSortedFunc(accs, func(a, b Accelerator) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("not sorted by name")
	}
	for _, a := range accs {
		if a.Source == "" || a.Notes == "" || a.Vendor == "" || a.Variant == "" {
			t.Errorf("%s %s: want a vendor, variant, source and notes", a.Name, a.Variant)
		}
	}
}

func TestGPUNames(t *testing.T) {
	t.Parallel()
	c := mustLoad(t)
	tests := map[string]struct {
		in, want string
		ok       bool
	}{
		"lower case":      {"h100", "H100", true},
		"exact":           {"A100-80GB", "A100-80GB", true},
		"mixed case":      {"rtx5880-ADA", "RTX5880-Ada", true},
		"tpu slice":       {"TPU-v5p-8", "tpu-v5p-8", true},
		"spec-only name":  {"Gaudi3", "", false},
		"near miss":       {"H100 ", "", false},
		"unknown":         {"K80", "", false},
		"empty":           {"", "", false},
		"tpu family name": {"tpu-v4", "", false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := c.CanonicalGPU(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("CanonicalGPU(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
			}
			if known := c.KnownGPU(tt.in); known != tt.ok {
				t.Errorf("KnownGPU(%q) = %v, want %v", tt.in, known, tt.ok)
			}
		})
	}
}

func TestResultsAreCopies(t *testing.T) {
	t.Parallel()
	c := mustLoad(t)
	c.Offers()[0].PricePerHour = -1
	c.Query(Query{Limit: 1})[0].PricePerHour = -1
	c.Accelerators()[0].Name = "x"
	c.InstanceTypes()[0].Name = "x"
	if c.offers[0].PricePerHour < 0 || c.accelerators[0].Name == "x" || c.types[0].Name == "x" {
		t.Error("a returned slice shares memory with the catalog")
	}
}
