package gpu_test

import (
	"testing"

	"github.com/gpufleet/gpufleet/internal/agent/gpu"
	"github.com/gpufleet/gpufleet/internal/model"
)

func TestCatalogName(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		product string
		memory  model.Bytes
		want    string
	}{
		"H100 SXM":              {product: "NVIDIA H100 80GB HBM3", memory: 81559 * model.MiB, want: "H100"},
		"H100 PCIe":             {product: "NVIDIA H100 PCIe", memory: 81559 * model.MiB, want: "H100"},
		"H200":                  {product: "NVIDIA H200", memory: 143771 * model.MiB, want: "H200"},
		"GH200 is not H200":     {product: "NVIDIA GH200 480GB", memory: 97871 * model.MiB, want: "GH200"},
		"A100 SXM 40GB":         {product: "NVIDIA A100-SXM4-40GB", memory: 40960 * model.MiB, want: "A100"},
		"A100 SXM 80GB by name": {product: "NVIDIA A100-SXM4-80GB", memory: 0, want: "A100-80GB"},
		"A100 PCIe 80GB":        {product: "NVIDIA A100 80GB PCIe", memory: 81920 * model.MiB, want: "A100-80GB"},
		"A100 80GB by memory":   {product: "NVIDIA A100-PCIE", memory: 81920 * model.MiB, want: "A100-80GB"},
		"T4":                    {product: "Tesla T4", memory: 15360 * model.MiB, want: "T4"},
		"L4":                    {product: "NVIDIA L4", memory: 23034 * model.MiB, want: "L4"},
		"L40S is not L4":        {product: "NVIDIA L40S", memory: 46068 * model.MiB, want: "L40S"},
		"A10G is not A10":       {product: "NVIDIA A10G", memory: 23028 * model.MiB, want: "A10G"},
		"A10":                   {product: "NVIDIA A10", memory: 23028 * model.MiB, want: "A10"},
		"V100":                  {product: "Tesla V100-SXM2-16GB", memory: 16384 * model.MiB, want: "V100"},
		"lower case":            {product: "nvidia h100 80gb hbm3", want: "H100"},
		"unknown kept raw":      {product: " NVIDIA GeForce RTX 4090 ", memory: 24564 * model.MiB, want: "NVIDIA GeForce RTX 4090"},
		"empty":                 {product: "", want: ""},
	}
	for name, tc := range tests {
		if got := gpu.CatalogName(tc.product, tc.memory); got != tc.want {
			t.Errorf("%s: CatalogName(%q, %v) = %q; want %q", name, tc.product, tc.memory, got, tc.want)
		}
	}
}
