package gpu_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agent/gpu"
	"github.com/gpufleet/gpufleet/internal/model"
)

// catalog stands in for the catalog's accelerator lookup.
func catalog(name string) (model.Bytes, bool) {
	mem, ok := map[string]model.Bytes{"H100": 80 * model.GiB, "A100-80GB": 80 * model.GiB, "T4": 16 * model.GiB}[name]
	return mem, ok
}

func fakeGPUs(n int, name string, mem model.Bytes) []model.GPU {
	gpus := make([]model.GPU, n)
	for i := range gpus {
		gpus[i] = model.GPU{Index: i, UUID: "GPU-fake-" + strconv.Itoa(i), Model: name, Memory: mem, NVLinkGroup: 0}
	}
	return gpus
}

func TestParseFake(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in      string
		want    []model.GPU
		wantErr string // a substring of the error
	}{
		"count and model":      {in: "8xH100", want: fakeGPUs(8, "H100", 80*model.GiB)},
		"model with a dash":    {in: "2xA100-80GB", want: fakeGPUs(2, "A100-80GB", 80*model.GiB)},
		"capital X and spaces": {in: " 2XT4 ", want: fakeGPUs(2, "T4", 16*model.GiB)},
		"model alone is one":   {in: "T4", want: fakeGPUs(1, "T4", 16*model.GiB)},
		"unknown model":        {in: "8xH1000", wantErr: `the catalog has no GPU model "H1000"; use a catalog model name`},
		"zero":                 {in: "0xH100", wantErr: "count 0 out of range"},
		"too many":             {in: "65xH100", wantErr: "count 65 out of range"},
		"no model":             {in: "8x", wantErr: "no model"},
		"empty":                {in: "", wantErr: "want COUNTxMODEL"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := gpu.ParseFake(tc.in, catalog)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseFake(%q) error = %v; want one containing %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseFake(%q): %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseFake(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestParseFakeNeedsACatalog(t *testing.T) {
	t.Parallel()
	if _, err := gpu.ParseFake("1xH100", nil); err == nil {
		t.Fatal("ParseFake without a catalog lookup succeeded")
	}
}
