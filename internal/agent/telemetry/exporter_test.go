package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseExposition(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("testdata/dcgm-exporter-h100x2.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseExposition(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []GPUSample{
		gpu("GPU-3b5e6f2a-8c1d-4e7f-9a2b-1c3d5e7f9a0b", 0, map[Field]float64{
			SMClock: 1980, MemClock: 2619, Temp: 61, Power: 652.313, GPUUtil: 97, MemCopyUtil: 41, XID: 0,
			FBUsed: 71234, FBTotal: 71234 + 9796 + 529, ThrottleReasons: 0,
			SMActive: 0.912774, SMOccupancy: 0.375219, TensorActive: 0.512093, DRAMActive: 0.431187,
			PCIeTX: 1.29e8, PCIeRX: 2.104e9, NVLinkTX: 6.2019e10, NVLinkRX: 6.1877e10,
		}),
		gpu("GPU-7c9d0e1f-2a3b-4c5d-8e6f-7a8b9c0d1e2f", 1, map[Field]float64{
			SMClock: 1755, MemClock: 2619, Temp: 44, Power: 201.07, GPUUtil: 34, MemCopyUtil: 12, XID: 79,
			FBUsed: 40903, FBTotal: 40903 + 40127 + 529, ThrottleReasons: 4,
			SMActive: 0.301145, SMOccupancy: 0.120031, TensorActive: 0.020011, DRAMActive: 0.702334,
			PCIeTX: 3.01e7, PCIeRX: 4.4e7, NVLinkTX: 1.2e6, NVLinkRX: 1.1e6,
		}),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseExpositionErrors(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"no labels":          "DCGM_FI_DEV_GPU_UTIL 3\n",
		"unterminated value": `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a} 3` + "\n",
		"bad value":          `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} x` + "\n",
		"two uuids":          `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 1` + "\n" + `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-b"} 1` + "\n",
	}
	for name, text := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := ParseExposition([]byte(text)); err == nil || !strings.Contains(err.Error(), "line ") {
				t.Errorf("err = %v, want one naming the line", err)
			}
		})
	}
}

func TestExporterSource(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("testdata/dcgm-exporter-h100x2.txt")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Write(text)
	}))
	defer srv.Close()
	src := NewExporter(ExporterOptions{URL: srv.URL + "/metrics", Client: srv.Client()})
	if len(src.Missing()) != int(NumFields) {
		t.Errorf("Missing before the first scrape = %v, want every field", src.Missing())
	}
	s, err := src.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.GPUs) != 2 {
		t.Fatalf("%d GPUs, want 2", len(s.GPUs))
	}
	if diff := cmp.Diff([]Field(nil), src.Missing()); diff != "" {
		t.Errorf("Missing (-want +got):\n%s", diff)
	}
	bad := NewExporter(ExporterOptions{URL: srv.URL + "/nope", Client: srv.Client()})
	if _, err := bad.Sample(context.Background()); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("err = %v, want the status", err)
	}
}

func FuzzParseExposition(f *testing.F) {
	b, err := os.ReadFile("testdata/dcgm-exporter-h100x2.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`DCGM_FI_DEV_FB_USED{gpu="0",UUID="U",a="\\\"\n"} 1e3 1700000000` + "\n"))
	f.Add([]byte(`DCGM_FI_DEV_FB_FREE{gpu="-1",UUID=""} NaN`))
	f.Fuzz(func(t *testing.T, b []byte) {
		gpus, err := ParseExposition(b)
		if err != nil {
			return
		}
		for i, g := range gpus {
			if g.UUID == "" || (i > 0 && gpus[i-1].Index >= g.Index) {
				t.Fatalf("GPUs not sorted by unique index, or no UUID: %+v", gpus)
			}
		}
	})
}
