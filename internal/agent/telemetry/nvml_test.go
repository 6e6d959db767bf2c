//go:build nvml && cgo

package telemetry

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/efficiency"
)

// load is what a mocked GPU is doing; the mock node's NVML answers from it.
type load struct {
	sm, occupancy, tensor, dram float64 // percent, as GPM reports them
	util, memUtil               uint32  // percent
	usedMiB                     uint64
	powerMW, tempC              uint32
	smMHz, memMHz               uint32
	throttle                    uint64
	pcieKBs                     uint32    // per direction, non-GPM counter
	pcieMiBs, nvlinkMiBs        float64   // per direction, GPM
	nvlinkKiB                   [2]uint64 // cumulative TX, RX counters (non-GPM)
}

// mockNode programs a go-nvml mock server's devices with loads. The mock
// leaves telemetry calls unset (they panic); this sets the ones the NVML
// source makes.
type mockNode struct {
	srv    *server.Server
	gpm    bool
	mu     sync.Mutex
	loads  []load
	events []nvml.EventData
}

func newMockNode(t testing.TB, srv *server.Server, gpm bool, base load) *mockNode {
	t.Helper()
	n := &mockNode{srv: srv, gpm: gpm, loads: make([]load, len(srv.Devices))}
	for i := range n.loads {
		n.loads[i] = base
	}
	sampleDev := map[nvml.GpmSample]int{}
	srv.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
		s := &mock.GpmSample{}
		s.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
		return s, nvml.SUCCESS
	}
	srv.GpmMetricsGetFunc = func(m *nvml.GpmMetricsGetType) nvml.Return {
		n.mu.Lock()
		defer n.mu.Unlock()
		i, ok := sampleDev[m.Sample2]
		if !ok || m.Sample1 == m.Sample2 {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		l := n.loads[i]
		for k := range m.NumMetrics {
			r := &m.Metrics[k]
			r.NvmlReturn = uint32(nvml.SUCCESS)
			switch nvml.GpmMetricId(r.MetricId) {
			case nvml.GPM_METRIC_SM_UTIL:
				r.Value = l.sm
			case nvml.GPM_METRIC_SM_OCCUPANCY:
				r.Value = l.occupancy
			case nvml.GPM_METRIC_ANY_TENSOR_UTIL:
				r.Value = l.tensor
			case nvml.GPM_METRIC_DRAM_BW_UTIL:
				r.Value = l.dram
			case nvml.GPM_METRIC_PCIE_TX_PER_SEC, nvml.GPM_METRIC_PCIE_RX_PER_SEC:
				r.Value = l.pcieMiBs
			case nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC:
				r.Value = l.nvlinkMiBs
			default:
				r.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			}
		}
		return nvml.SUCCESS
	}
	set := &mock.EventSet{}
	set.WaitFunc = func(uint32) (nvml.EventData, nvml.Return) {
		n.mu.Lock()
		defer n.mu.Unlock()
		if len(n.events) == 0 {
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		ev := n.events[0]
		n.events = n.events[1:]
		return ev, nvml.SUCCESS
	}
	set.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }

	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		get := func() load {
			n.mu.Lock()
			defer n.mu.Unlock()
			return n.loads[i]
		}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			l := get()
			return nvml.Utilization{Gpu: l.util, Memory: l.memUtil}, nvml.SUCCESS
		}
		dev.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			total := dev.MemoryInfo.Total
			used := get().usedMiB << 20
			return nvml.Memory{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
		}
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return get().powerMW, nvml.SUCCESS }
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return get().tempC, nvml.SUCCESS }
		dev.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
			if c == nvml.CLOCK_MEM {
				return get().memMHz, nvml.SUCCESS
			}
			return get().smMHz, nvml.SUCCESS
		}
		dev.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return get().throttle, nvml.SUCCESS }
		dev.GetPcieThroughputFunc = func(nvml.PcieUtilCounter) (uint32, nvml.Return) { return get().pcieKBs, nvml.SUCCESS }
		dev.GetFieldValuesFunc = func(vs []nvml.FieldValue) nvml.Return {
			l := get()
			for k := range vs {
				vs[k].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
				vs[k].NvmlReturn = uint32(nvml.SUCCESS)
				v := l.nvlinkKiB[0]
				if vs[k].FieldId == nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX {
					v = l.nvlinkKiB[1]
				}
				for b := range 8 {
					vs[k].Value[b] = byte(v >> (8 * b))
				}
			}
			return nvml.SUCCESS
		}
		dev.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
			var s uint32
			if gpm {
				s = 1
			}
			return nvml.GpmSupport{Version: 1, IsSupportedDevice: s}, nvml.SUCCESS
		}
		dev.GpmSampleGetFunc = func(s nvml.GpmSample) nvml.Return {
			n.mu.Lock()
			defer n.mu.Unlock()
			sampleDev[s] = i
			return nvml.SUCCESS
		}
		dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	}
	return n
}

func (n *mockNode) setLoad(i int, f func(*load)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f(&n.loads[i])
}

func (n *mockNode) xid(i int, code uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, nvml.EventData{Device: n.srv.Devices[i], EventType: nvml.EventTypeXidCriticalError, EventData: code})
}

func (n *mockNode) uuid(i int) string { return n.srv.Devices[i].(*server.Device).UUID }

var busyH100 = load{
	sm: 91, occupancy: 37.5, tensor: 51, dram: 43, util: 97, memUtil: 41, usedMiB: 71234,
	powerMW: 652313, tempC: 61, smMHz: 1980, memMHz: 2619, pcieMiBs: 1024, nvlinkMiBs: 60 * 1024,
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestNVMLOnMockedH100(t *testing.T) {
	t.Parallel()
	node := newMockNode(t, dgxh100.New(), true, busyH100)
	clk := clock.NewFake(t0)
	src, err := NewNVML(node.srv, NVMLOptions{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if diff := cmp.Diff([]Field(nil), src.Missing()); diff != "" {
		t.Errorf("Missing (-want +got):\n%s", diff)
	}

	first, err := src.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(first.GPUs) != 8 {
		t.Fatalf("%d GPUs, want 8", len(first.GPUs))
	}
	if !first.GPUs[0].Present.Has(SMActive) {
		t.Error("no SM active on the first sample; NewNVML takes the first GPM sample")
	}

	clk.Advance(5 * time.Second)
	node.setLoad(3, func(l *load) { l.sm, l.tensor, l.util = 3, 0, 4 })
	node.xid(3, 79)
	s, err := src.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := GPUSample{UUID: node.uuid(3), Index: 3}
	for f, v := range map[Field]float64{
		GPUUtil: 4, MemCopyUtil: 41, SMActive: 0.03, SMOccupancy: 0.375, TensorActive: 0, DRAMActive: 0.43,
		FBUsed: 71234, FBTotal: 81920, PCIeTX: 1 << 30, PCIeRX: 1 << 30, NVLinkTX: 60 << 30, NVLinkRX: 60 << 30,
		Power: 652.313, Temp: 61, SMClock: 1980, MemClock: 2619, ThrottleReasons: 0, XID: 79,
	} {
		want.Set(f, v)
	}
	if diff := cmp.Diff(want, s.GPUs[3], cmp.Comparer(approx)); diff != "" {
		t.Errorf("GPU 3 (-want +got):\n%s", diff)
	}
	if !s.Time.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("time %v, want the fake clock's", s.Time)
	}
	if x, _ := s.GPUs[2].Get(XID); x != 0 {
		t.Errorf("GPU 2 XID %v, want 0: the event was GPU 3's", x)
	}
}

func approx(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(a)) }

func TestNVMLOnMockedA100WithoutGPM(t *testing.T) {
	t.Parallel()
	l := busyH100
	l.pcieKBs, l.nvlinkKiB = 2048, [2]uint64{1000, 2000}
	node := newMockNode(t, dgxa100.New(), false, l)
	clk := clock.NewFake(t0)
	src, err := NewNVML(node.srv, NVMLOptions{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if diff := cmp.Diff([]Field{SMActive, SMOccupancy, TensorActive, DRAMActive}, src.Missing()); diff != "" {
		t.Errorf("Missing (-want +got):\n%s", diff)
	}
	if _, err := src.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	node.setLoad(0, func(l *load) { l.nvlinkKiB = [2]uint64{1000 + 10*1024, 2000 + 20*1024} })
	s, err := src.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	g := s.GPUs[0]
	got := map[Field]float64{}
	for _, f := range []Field{SMActive, PCIeTX, PCIeRX, NVLinkTX, NVLinkRX} {
		if v, ok := g.Get(f); ok {
			got[f] = v
		}
	}
	want := map[Field]float64{PCIeTX: 2048 * 1024, PCIeRX: 2048 * 1024, NVLinkTX: 1024 * 1024, NVLinkRX: 2 * 1024 * 1024}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPU 0 (-want +got):\n%s", diff)
	}
}

func TestNVMLNotSupportedIsMissingAndNotAskedAgain(t *testing.T) {
	t.Parallel()
	node := newMockNode(t, dgxh100.New(), true, busyH100)
	calls := 0
	for _, d := range node.srv.Devices {
		d.(*server.Device).GetPowerUsageFunc = func() (uint32, nvml.Return) {
			calls++
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
	}
	src, err := NewNVML(node.srv, NVMLOptions{Clock: clock.NewFake(t0)})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s, err := src.Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s.GPUs[0].Present.Has(Power) {
			t.Fatal("power present though NOT_SUPPORTED")
		}
	}
	if calls != 8 {
		t.Errorf("GetPowerUsage called %d times, want once per GPU", calls)
	}
	if diff := cmp.Diff([]Field{Power}, src.Missing()); diff != "" {
		t.Errorf("Missing (-want +got):\n%s", diff)
	}
}

// TestIdleJobOnMockedH100 is the acceptance check: a job holding
// two GPUs of a mocked H100 node at 3% SM activity is idle after 10
// minutes, and not before; its neighbour on the same node stays healthy.
func TestIdleJobOnMockedH100(t *testing.T) {
	t.Parallel()
	node := newMockNode(t, dgxh100.New(), true, busyH100)
	for _, i := range []int{6, 7} {
		node.setLoad(i, func(l *load) { l.sm, l.tensor, l.util, l.dram, l.nvlinkMiBs, l.pcieMiBs = 3, 0, 5, 1, 0, 2 })
	}
	clk := clock.NewFake(t0)
	src, err := NewNVML(node.srv, NVMLOptions{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	tracker := efficiency.NewTracker(efficiency.Thresholds{})
	allocs := map[string][]string{
		"idle-a1": {node.uuid(6), node.uuid(7)},
		"busy-a1": {node.uuid(0), node.uuid(1), node.uuid(2), node.uuid(3)},
	}
	sampler := NewSampler(src, SamplerOptions{Clock: clk, OnSample: func(s Sample) {
		tracker.Observe(s.Time, s.Readings(), allocs, math.NaN())
	}})
	var changes []efficiency.Change
	step := func() {
		clk.Advance(5 * time.Second)
		if !sampler.SampleOnce(context.Background()) {
			t.Fatal("sample failed")
		}
		changes = append(changes, tracker.Evaluate(clk.Now())...)
	}
	sampler.SampleOnce(context.Background()) // t0
	for clk.Now().Before(t0.Add(10*time.Minute + 5*time.Second)) {
		step()
		if v, _, _ := tracker.Verdict("idle-a1"); v.Class == efficiency.Idle {
			break
		}
	}
	v, since, _ := tracker.Verdict("idle-a1")
	if v.Class != efficiency.Idle {
		t.Fatalf("after %s at 3%% SM active: class %s, want idle; findings %v", clk.Now().Sub(t0), v.Class, v.Findings)
	}
	if got, want := clk.Now(), t0.Add(10*time.Minute); !got.Equal(want) {
		t.Errorf("idle at %s, want after 10 minutes of low activity (%s)", got.Sub(t0), want.Sub(t0))
	}
	if !since.Equal(t0) {
		t.Errorf("idle since %s, want t0", since.Sub(t0))
	}
	var last efficiency.Change
	for _, c := range changes {
		if c.Attempt == "idle-a1" {
			last = c
		}
	}
	if last.To != efficiency.Idle || last.From != efficiency.UnderUsed || !last.Since.Equal(t0) || !last.At.Equal(t0.Add(10*time.Minute)) {
		t.Errorf("last change of idle-a1 = %+v, want under-used to idle at t0+10m, since t0", last)
	}
	if v, _, _ := tracker.Verdict("busy-a1"); v.Class != efficiency.Healthy {
		t.Errorf("busy-a1 class %s, want healthy; findings %v", v.Class, v.Findings)
	}
}

// BenchmarkNVMLSample8GPUs is the target: one sample of 8 GPUs
// under 5 ms of agent CPU. It runs against go-nvml's mock, whose
// bookkeeping (a mutex and an append per call) costs more than the source's
// own logic; the real library adds the driver's ioctl time.
func BenchmarkNVMLSample8GPUs(b *testing.B) {
	node := newMockNode(b, dgxh100.New(), true, busyH100)
	src, err := NewNVML(node.srv, NVMLOptions{Clock: clock.NewFake(t0)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := src.Sample(ctx); err != nil {
			b.Fatal(err)
		}
	}
	perSample := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(perSample/DefaultInterval.Seconds()*100, "%core@5s")
}
