package catalog

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

//go:generate go run ./gen -src ../../../shared/data -out data

var (
	//go:embed data/catalog.csv.gz
	catalogCSVGz []byte
	//go:embed data/spot_advisor.csv
	spotAdvisorCSV []byte
	//go:embed data/specs.json
	specsJSON []byte
)

// Verified levels of an Accelerator's figures.
const (
	// VerifiedDatasheet means every figure is the vendor's published figure
	// for this variant, or arithmetic on one that Notes spells out.
	VerifiedDatasheet = "datasheet"
	// VerifiedThirdParty means at least one figure comes from pages other than
	// the vendor's, or was not re-checked; Notes say which.
	VerifiedThirdParty = "third-party"
	// Unverified means the figures were not checked against any document.
	Unverified = "unverified"
)

// Accelerator is one accelerator variant's published facts. Figures are per
// GPU (per chip for TPUs), dense (without 2:4 sparsity); zero means the
// vendor publishes no figure or the number format is unsupported (no BF16
// before Ampere).
type Accelerator struct {
	// Name is the catalog's accelerator name; for TPUs it is the slice name
	// without its size (tpu-v5litepod).
	Name string `json:"name"`
	// Variant names the form factor and memory, e.g. "SXM5 80GB".
	Variant string `json:"variant"`
	Vendor  string `json:"vendor"`
	// Memory is the vendor's "GB" figure read as GiB, as the catalog reads
	// it; for instance rows the catalog's own per-GPU memory is authoritative.
	Memory             model.Bytes `json:"memory,omitempty"`
	MemoryBandwidthGBs float64     `json:"memoryBandwidthGBs,omitempty"`
	BF16TFLOPS         float64     `json:"bf16TFLOPS,omitempty"`
	FP16TFLOPS         float64     `json:"fp16TFLOPS,omitempty"`
	FP32TFLOPS         float64     `json:"fp32TFLOPS,omitempty"`
	// Interconnect is the device's link as the vendor names it ("NVLink 4");
	// InterconnectGBs its bidirectional bandwidth per device.
	Interconnect    string  `json:"interconnect,omitempty"`
	InterconnectGBs float64 `json:"interconnectGBs,omitempty"`
	TDPWatts        float64 `json:"tdpWatts,omitempty"`
	// Source is the document the figures were checked against.
	Source string `json:"source"`
	// Verified is VerifiedDatasheet, VerifiedThirdParty or Unverified.
	Verified string `json:"verified"`
	// Notes say what was checked and what differs from the source table.
	Notes string `json:"notes"`
}

// InstanceType is a provider's machine shape.
type InstanceType struct {
	Provider string `json:"provider"`
	Name     string `json:"name"`
	GPU      string `json:"gpu"`
	GPUCount int    `json:"gpuCount"`
	// VCPUs and Memory (host memory) are zero for TPU slices.
	VCPUs  float64     `json:"vcpus,omitempty"`
	Memory model.Bytes `json:"memory,omitempty"`
	// GPUMemory is per GPU, as the catalog row reports it (usable memory for
	// marketplace offers); zero for TPU slices.
	GPUMemory model.Bytes `json:"gpuMemory,omitempty"`
	// Interconnect is the fabric between the instance's GPUs, one of the
	// Interconnect constants, derived from the instance family by the table
	// in interconnect.go.
	Interconnect string `json:"interconnect"`
}

// Catalog is the loaded catalog. It is immutable; see the package
// documentation for its invariants.
type Catalog struct {
	// offers holds every offer in Query's default order (see compareOffers).
	offers []model.Offer
	// byGPU lists, per catalog accelerator name, its positions in offers,
	// ascending.
	byGPU map[string][]int32
	// gpuNames maps lower-cased catalog accelerator names to their spelling.
	gpuNames map[string]string
	// regions holds every offer region once, for matching Query.Regions
	// against regions rather than offers.
	regions []string
	// accelerators is sorted by name, the variant most catalog rows carry
	// first; primary maps a lower-cased name to that first entry.
	accelerators []Accelerator
	primary      map[string]int
	types        []InstanceType
}

// Load parses the embedded catalog. It is meant to be called once by the
// binary and the result shared.
func Load() (*Catalog, error) {
	specs, err := decodeSpecs(specsJSON)
	if err != nil {
		return nil, fmt.Errorf("loading catalog: %w", err)
	}
	bands, err := decodeBands(spotAdvisorCSV)
	if err != nil {
		return nil, fmt.Errorf("loading catalog: %w", err)
	}
	rows, err := decodeRows(catalogCSVGz)
	if err != nil {
		return nil, fmt.Errorf("loading catalog: %w", err)
	}
	return build(rows, specs, bands), nil
}

// build assembles a Catalog from decoded data in four steps.
func build(rows []row, specs []Accelerator, bands map[bandKey]int) *Catalog {
	c := &Catalog{
		byGPU:    map[string][]int32{},
		gpuNames: map[string]string{},
		primary:  map[string]int{},
	}
	// 1. Every accelerator name, including those of fractional rows.
	for _, r := range rows {
		c.gpuNames[strings.ToLower(r.gpu)] = r.gpu
	}

	// 2. Offers, in the default order, and instance types.
	offers, types := newOffers(rows, bands)
	// Sorting positions rather than offers moves 4 bytes per swap, not 168.
	order := make([]int32, len(offers))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return compareOffers(&offers[a], &offers[b]) })
	c.offers = make([]model.Offer, len(offers))
	for i, j := range order {
		c.offers[i] = offers[j]
	}
	c.types = types

	// 3. Indexes for Query.
	seen := map[string]bool{}
	for i, o := range c.offers {
		c.byGPU[o.GPU] = append(c.byGPU[o.GPU], int32(i))
		if !seen[o.Region] {
			seen[o.Region] = true
			c.regions = append(c.regions, o.Region)
		}
	}
	slices.Sort(c.regions)

	// 4. Accelerators. The spec table lists a name's primary variant first;
	// a stable sort by name keeps it first.
	c.accelerators = specs
	slices.SortStableFunc(c.accelerators, func(a, b Accelerator) int { return strings.Compare(a.Name, b.Name) })
	for i, a := range c.accelerators {
		key := strings.ToLower(a.Name)
		if _, ok := c.primary[key]; !ok {
			c.primary[key] = i
		}
	}
	return c
}

// newOffers returns one offer per row and price, unsorted, and the sorted,
// distinct instance types of the offered rows. Rows with less than one
// whole GPU are skipped.
func newOffers(rows []row, bands map[bandKey]int) ([]model.Offer, []InstanceType) {
	offers := make([]model.Offer, 0, 2*len(rows)) // on-demand and spot
	seen := map[InstanceType]bool{}
	var types []InstanceType
	links := map[[3]string]string{}
	for _, r := range rows {
		count := int(r.gpuCount)
		if count < 1 || float64(count) != r.gpuCount {
			continue
		}
		linkKey := [3]string{r.provider, r.instanceType, r.gpu}
		link, ok := links[linkKey]
		if !ok {
			link = interconnect(r.provider, r.instanceType, r.gpu)
			links[linkKey] = link
		}
		it := InstanceType{
			Provider:     r.provider,
			Name:         r.instanceType,
			GPU:          r.gpu,
			GPUCount:     count,
			VCPUs:        r.vcpus,
			Memory:       gibToBytes(r.memoryGiB),
			GPUMemory:    gibToBytes(r.gpuMemoryGiB),
			Interconnect: link,
		}
		if !seen[it] {
			seen[it] = true
			types = append(types, it)
		}
		o := model.Offer{
			Provider:     it.Provider,
			Region:       r.region,
			Zone:         r.zone,
			InstanceType: it.Name,
			GPU:          it.GPU,
			GPUCount:     it.GPUCount,
			GPUMemory:    it.GPUMemory,
			VCPUs:        it.VCPUs,
			Memory:       it.Memory,
			Interconnect: it.Interconnect,
		}
		if r.hasPrice {
			o.CapacityType, o.PricePerHour = model.OnDemand, r.price
			offers = append(offers, o)
		}
		if r.hasSpotPrice {
			o.CapacityType, o.PricePerHour = model.Spot, r.spotPrice
			o.InterruptionRate = interruptionRate(spotBand(bands, r.provider, r.instanceType, r.region))
			offers = append(offers, o)
		}
	}
	slices.SortFunc(types, compareTypes)
	return offers, types
}

// Offers returns every offer, in Query's default order (price per
// GPU-hour).
func (c *Catalog) Offers() []model.Offer { return slices.Clone(c.offers) }

// SharedOffers returns the catalog's offers without copying them (Offers
// copies 1.3 MB), for callers that only read them, such as a ranking per
// request. The catalog never changes them after Load; callers must not
// either.
func (c *Catalog) SharedOffers() []model.Offer { return c.offers }

// InstanceTypes returns every instance shape that has at least one whole
// GPU, sorted by provider, name, GPU, GPU count and GPU memory. A name can
// appear more than once: GCP's n1 hosts take several GPU models, and a Vast
// offer name covers machines with different GPU memory.
func (c *Catalog) InstanceTypes() []InstanceType { return slices.Clone(c.types) }

// Accelerators returns every spec entry, sorted by name with each name's
// primary variant (the one Accelerator returns) first.
func (c *Catalog) Accelerators() []Accelerator { return slices.Clone(c.accelerators) }

// Accelerator returns the spec entry for an accelerator name, matched
// without regard to case: for a catalog name the variant most of its
// instances carry (H100: SXM5), for a TPU slice name its chip.
func (c *Catalog) Accelerator(name string) (Accelerator, bool) {
	i, ok := c.primary[specName(strings.ToLower(name))]
	if !ok {
		return Accelerator{}, false
	}
	return c.accelerators[i], true
}

// KnownGPU reports whether name is an accelerator name in the catalog,
// without regard to case.
func (c *Catalog) KnownGPU(name string) bool {
	_, ok := c.gpuNames[strings.ToLower(name)]
	return ok
}

// CanonicalGPU returns the catalog's spelling of an accelerator name matched
// without regard to case ("h100" → "H100"), and whether there is one.
func (c *Catalog) CanonicalGPU(name string) (string, bool) {
	canon, ok := c.gpuNames[strings.ToLower(name)]
	return canon, ok
}

// specName maps a lower-cased catalog accelerator name to its spec entry's:
// a TPU slice (tpu-v5litepod-8) shares its chip's entry (tpu-v5litepod).
func specName(name string) string {
	if !strings.HasPrefix(name, "tpu-") {
		return name
	}
	i := strings.LastIndexByte(name, '-')
	size := name[i+1:]
	if size == "" || strings.Trim(size, "0123456789") != "" {
		return name
	}
	return name[:i]
}

func gibToBytes(gib float64) model.Bytes { return model.Bytes(gib*float64(model.GiB) + 0.5) }
