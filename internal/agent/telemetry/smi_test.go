package telemetry

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/clock"
)

// gpu builds a GPUSample from field values.
func gpu(uuid string, index int, vals map[Field]float64) GPUSample {
	g := GPUSample{UUID: uuid, Index: index}
	for f, v := range vals {
		g.Set(f, v)
	}
	return g
}

func TestParseSMI(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		file    string
		want    []GPUSample // checked in full; nil checks only count
		count   int
		wantErr string
	}{
		"8xH100": {file: "smi-h100x8.csv", count: 8, want: []GPUSample{
			gpu("GPU-3b5e6f2a-8c1d-4e7f-9a2b-1c3d5e7f9a0b", 0, map[Field]float64{
				GPUUtil: 97, MemCopyUtil: 41, FBUsed: 71234, FBTotal: 81559, Power: 652.31, Temp: 61,
				SMClock: 1980, MemClock: 2619, ThrottleReasons: 0,
			}),
		}},
		"T4": {file: "smi-t4x1.csv", count: 1, want: []GPUSample{
			gpu("GPU-6a1f3c2e-9b7d-4e21-a3c5-0f8e2d4b6a19", 0, map[Field]float64{
				GPUUtil: 42, MemCopyUtil: 17, FBUsed: 6021, FBTotal: 15360, Power: 38.52, Temp: 54,
				SMClock: 1590, MemClock: 5000, ThrottleReasons: 0,
			}),
		}},
		"N/A and units": {file: "smi-na.csv", count: 2, want: []GPUSample{
			gpu("GPU-1d2c3b4a-5f6e-4d7c-8b9a-0e1f2a3b4c5d", 0, map[Field]float64{GPUUtil: 12, FBUsed: 2048, FBTotal: 24576, Temp: 47}),
			gpu("GPU-2e3d4c5b-6a7f-4e8d-9cab-1f2a3b4c5d6e", 1, map[Field]float64{
				MemCopyUtil: 3, FBUsed: 1024, FBTotal: 24576, Power: 61.2, Temp: 45, SMClock: 1410, MemClock: 1215, ThrottleReasons: 0x20,
			}),
		}},
		"short line": {file: "smi-bad.csv", wantErr: "10 columns, want 11"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseSMI(out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.count {
				t.Fatalf("%d GPUs, want %d", len(got), tt.count)
			}
			if diff := cmp.Diff(tt.want, got[:len(tt.want)]); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			for i, g := range got {
				if g.Index != i {
					t.Errorf("GPU %d has index %d; want sorted, dense", i, g.Index)
				}
			}
		})
	}
}

func TestSMISourceRunsTheQuery(t *testing.T) {
	t.Parallel()
	out, err := os.ReadFile("testdata/smi-h100x8.csv")
	if err != nil {
		t.Fatal(err)
	}
	var gotArgs []string
	clk := clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	src := NewSMI(SMIOptions{Clock: clk, Run: func(_ context.Context, program string, args ...string) ([]byte, error) {
		gotArgs = append([]string{program}, args...)
		return out, nil
	}})
	s, err := src.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"nvidia-smi",
		"--query-gpu=uuid,index,utilization.gpu,utilization.memory,memory.used,memory.total,power.draw,temperature.gpu,clocks.sm,clocks.mem,clocks_throttle_reasons.active",
		"--format=csv,noheader,nounits"}
	if diff := cmp.Diff(want, gotArgs); diff != "" {
		t.Errorf("command (-want +got):\n%s", diff)
	}
	if len(s.GPUs) != 8 || !s.Time.Equal(clk.Now()) {
		t.Errorf("sample has %d GPUs at %v", len(s.GPUs), s.Time)
	}
	wantMissing := []Field{SMActive, SMOccupancy, TensorActive, DRAMActive, PCIeTX, PCIeRX, NVLinkTX, NVLinkRX, XID}
	if diff := cmp.Diff(wantMissing, src.Missing()); diff != "" {
		t.Errorf("Missing (-want +got):\n%s", diff)
	}

	boom := errors.New("boom")
	failing := NewSMI(SMIOptions{Run: func(context.Context, string, ...string) ([]byte, error) { return nil, boom }})
	if _, err := failing.Sample(context.Background()); !errors.Is(err, boom) {
		t.Errorf("err = %v, want it to wrap the command's", err)
	}
}

func FuzzParseSMI(f *testing.F) {
	for _, name := range []string{"smi-h100x8.csv", "smi-t4x1.csv", "smi-na.csv", "smi-bad.csv"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("GPU-x, 0, 0x, -1e999, NaN, Inf, [N/A], , ,,\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		gpus, err := ParseSMI(b)
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for _, g := range gpus {
			if seen[g.Index] || g.UUID == "" {
				t.Fatalf("duplicate index or empty uuid: %+v", g)
			}
			seen[g.Index] = true
			if g.Present&^AllFields != 0 {
				t.Fatalf("present set %b has unknown fields", g.Present)
			}
		}
	})
}
