package catalog

import (
	"testing"

	"github.com/gpufleet/gpufleet/internal/model"
)

func BenchmarkLoad(b *testing.B) {
	for b.Loop() {
		if _, err := Load(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkQueryWholeCatalog(b *testing.B) {
	c, err := Load()
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		q    Query
	}{
		// gpufleet offers --gpu H100 --min-gpu-memory 40Gi --gpus 8 --spot --region 'us-*' --sort price
		{"h100-8x-spot-us", Query{GPUs: []string{"H100"}, MinGPUMemory: 40 * model.GiB, GPUCount: 8,
			CapacityTypes: []model.CapacityType{model.Spot}, Regions: []string{"us-*"}, Sort: SortPrice}},
		{"unfiltered", Query{}},
		{"unfiltered-by-memory", Query{Sort: SortMemory}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				c.Query(bc.q)
			}
		})
	}
}
