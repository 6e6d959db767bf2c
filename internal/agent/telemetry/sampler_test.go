package telemetry

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/clock"
)

// countingSource returns a sample with one GPU whose utilisation counts
// calls; call 3 fails. Each call is announced on calls.
type countingSource struct {
	n     int
	calls chan int
}

func (c *countingSource) Name() string     { return "counting" }
func (c *countingSource) Missing() []Field { return nil }
func (c *countingSource) Close() error     { return nil }
func (c *countingSource) Sample(context.Context) (Sample, error) {
	c.n++
	defer func(n int) { c.calls <- n }(c.n)
	if c.n == 3 {
		return Sample{}, errors.New("flaky")
	}
	return Sample{GPUs: []GPUSample{gpu("GPU-a", 0, map[Field]float64{GPUUtil: float64(c.n)})}}, nil
}

func TestSamplerKeepsTheLastSamples(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	src := &countingSource{calls: make(chan int, 1)}
	var seen []float64
	s := NewSampler(src, SamplerOptions{Clock: clk, Keep: 3, OnSample: func(s Sample) {
		seen = append(seen, s.GPUs[0].Values[GPUUtil]) // on Run's goroutine; read after Run returns
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	wait := func(want int) {
		t.Helper()
		select {
		case n := <-src.calls:
			if n != want {
				t.Fatalf("call %d, want %d", n, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no call %d", want)
		}
	}
	wait(1) // Run samples at once
	for n := 2; n <= 6; n++ {
		clk.Advance(DefaultInterval)
		wait(n)
	}
	cancel()
	<-done
	if diff := cmp.Diff([]float64{1, 2, 4, 5, 6}, seen); diff != "" {
		t.Errorf("OnSample saw (-want +got):\n%s", diff)
	}
	var recent []float64
	for _, r := range s.Recent() {
		recent = append(recent, r.GPUs[0].Values[GPUUtil])
	}
	if diff := cmp.Diff([]float64{4, 5, 6}, recent); diff != "" {
		t.Errorf("Recent (-want +got):\n%s", diff)
	}
	latest, ok := s.Latest()
	if !ok || latest.GPUs[0].Values[GPUUtil] != 6 || !latest.Time.Equal(clk.Now()) {
		t.Errorf("Latest = %+v, %v", latest, ok)
	}
}

func TestNoGPUReportsNothing(t *testing.T) {
	t.Parallel()
	src := Detect(context.Background(), Options{Prefer: SourceNone})
	s, err := src.Sample(context.Background())
	if err != nil || len(s.GPUs) != 0 || src.Name() != SourceNone || len(src.Missing()) != int(NumFields) {
		t.Errorf("none source: %+v, %v, %s, %v", s, err, src.Name(), src.Missing())
	}
}

// TestDetect writes the scripts it runs, so it does not run beside other
// tests that fork: a fork while a script is open for writing makes running
// it fail with "text file busy" (golang/go#22315). Its subtests only read.
func TestDetect(t *testing.T) {
	dir := t.TempDir()
	smi := filepath.Join(dir, "nvidia-smi")
	script := "#!/bin/sh\ncat " + filepath.Join(mustAbs(t, "testdata"), "smi-t4x1.csv") + "\n"
	if err := os.WriteFile(smi, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	noGPU := filepath.Join(dir, "nvidia-smi-nogpu")
	if err := os.WriteFile(noGPU, []byte("#!/bin/sh\necho 'No devices were found'\nexit 6\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		opts Options
		want string
	}{
		"nvidia-smi":         {Options{NvidiaSMI: smi, Prefer: SourceNvidiaSMI}, SourceNvidiaSMI},
		"no GPU":             {Options{NvidiaSMI: noGPU, ExporterURL: "http://127.0.0.1:1/metrics"}, SourceNone},
		"nvidia-smi missing": {Options{NvidiaSMI: filepath.Join(dir, "absent"), ExporterURL: "http://127.0.0.1:1/metrics"}, SourceNone},
		"prefer none":        {Options{NvidiaSMI: smi, Prefer: SourceNone}, SourceNone},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := Detect(context.Background(), tt.opts).Name(); got != tt.want {
				t.Errorf("Detect = %s, want %s", got, tt.want)
			}
		})
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestIOWait(t *testing.T) {
	t.Parallel()
	a, err := ParseProcStat([]byte("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5\nintr 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseProcStat([]byte("cpu  150 0 70 890 90 0 0 0 0 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := IOWaitFraction(a, b); math.Abs(got-0.2) > 1e-12 {
		t.Errorf("IOWaitFraction = %v, want 0.2", got)
	}
	if got := IOWaitFraction(b, a); !math.IsNaN(got) {
		t.Errorf("backwards counters = %v, want NaN", got)
	}
	if _, err := ParseProcStat([]byte("intr 1\n")); err == nil {
		t.Error("no cpu line parsed")
	}
}

func TestReadingConvertsUnits(t *testing.T) {
	t.Parallel()
	g := gpu("GPU-a", 0, map[Field]float64{GPUUtil: 40, SMActive: 0.3})
	r := g.Reading()
	if r.GPUUtil != 0.4 || r.SMActive != 0.3 || !math.IsNaN(r.TensorActive) {
		t.Errorf("Reading = %+v", r)
	}
}
