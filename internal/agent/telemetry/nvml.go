//go:build nvml && cgo

package telemetry

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpufleet/gpufleet/internal/clock"
)

// This file holds the NVML sampling logic over nvml.Interface, so it runs
// against go-nvml's mock servers in tests. go-nvml's nvml package, and so
// its mocks, compile only with cgo, and compiling it prints C deprecation
// warnings from NVIDIA's header: it is built only with the nvml tag, so a
// default `go build` neither compiles go-nvml nor needs cgo (.ci/run runs
// these tests with -tags nvml).

// NVML samples GPUs through NVML: a few microseconds a field, no process.
// On Hopper and newer (GPM-capable) GPUs it reads SM active, SM occupancy,
// tensor and DRAM activity, PCIe and NVLink bytes from GPM metrics between
// consecutive GPM samples (the first taken by NewNVML). On older GPUs those
// four profiling ratios are missing (DCGM computes them from profiling
// counters NVML does not expose), PCIe bytes come from NVML's PCIe
// throughput counter and NVLink bytes from its cumulative throughput
// fields. XIDs arrive as NVML events, drained without blocking on each
// Sample.
type NVML struct {
	lib     nvml.Interface
	clk     clock.Clock
	close   func() error
	devs    []*nvmlDevice
	events  nvml.EventSet
	metrics nvml.GpmMetricsGetType // reused: it is 20 KB
}

var _ Source = (*NVML)(nil)

type nvmlDevice struct {
	dev   nvml.Device
	uuid  string
	index int
	// capable is what this GPU may give; a field that answers
	// NOT_SUPPORTED leaves it and is not asked again.
	capable FieldSet
	gpm     bool
	samples [2]nvml.GpmSample
	cur     int  // the slot the next GPM sample goes to
	primed  bool // samples[1-cur] holds a sample
	// NVLink byte counters (KiB) when GPM is unavailable.
	nvlink     [2]nvml.FieldValue
	nvlinkPrev [2]uint64
	nvlinkAt   time.Time
	nvlinkOK   bool
	xid        float64
}

// gpmFields are the fields GPM metrics give, with their metric and the
// factor from NVML's unit (percent, MiB/s) to DCGM's (ratio, bytes/s).
var gpmFields = []struct {
	field  Field
	metric nvml.GpmMetricId
	scale  float64
}{
	{SMActive, nvml.GPM_METRIC_SM_UTIL, 0.01},
	{SMOccupancy, nvml.GPM_METRIC_SM_OCCUPANCY, 0.01},
	{TensorActive, nvml.GPM_METRIC_ANY_TENSOR_UTIL, 0.01},
	{DRAMActive, nvml.GPM_METRIC_DRAM_BW_UTIL, 0.01},
	{PCIeTX, nvml.GPM_METRIC_PCIE_TX_PER_SEC, 1 << 20},
	{PCIeRX, nvml.GPM_METRIC_PCIE_RX_PER_SEC, 1 << 20},
	{NVLinkTX, nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, 1 << 20},
	{NVLinkRX, nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, 1 << 20},
}

// profFields need GPM.
var profFields = SetOf(SMActive, SMOccupancy, TensorActive, DRAMActive)

// maxEventsPerSample bounds the XID events drained in one Sample, so a
// storm of events cannot stall sampling.
const maxEventsPerSample = 64

// NewNVML returns a source over lib, which the caller has initialised.
// It lists the GPUs, checks which support GPM and takes each one's first
// GPM sample, and registers for XID events (a driver that refuses them
// leaves XID missing).
func NewNVML(lib nvml.Interface, opts NVMLOptions) (*NVML, error) {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	s := &NVML{lib: lib, clk: opts.Clock, close: opts.Close}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs: %w", ret)
	}
	if set, ret := lib.EventSetCreate(); ret == nvml.SUCCESS {
		s.events = set
	}
	registered := 0
	for i := range n {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("getting GPU %d: %w", i, ret)
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("reading GPU %d's UUID: %w", i, ret)
		}
		d := &nvmlDevice{dev: dev, uuid: uuid, index: i, capable: AllFields &^ profFields &^ SetOf(XID)}
		if sup, ret := dev.GpmQueryDeviceSupport(); ret == nvml.SUCCESS && sup.IsSupportedDevice != 0 {
			d.gpm = true
			for j := range d.samples {
				sample, ret := lib.GpmSampleAlloc()
				if ret != nvml.SUCCESS {
					d.gpm = false
					break
				}
				d.samples[j] = sample
			}
		}
		if d.gpm {
			d.capable |= profFields
			d.takeGPM()
		} else {
			d.freeGPM()
			d.nvlink[0].FieldId = nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX
			d.nvlink[1].FieldId = nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX
			for k := range d.nvlink {
				d.nvlink[k].ScopeId = math.MaxUint32 // summed over all links
			}
		}
		if s.events != nil && dev.RegisterEvents(nvml.EventTypeXidCriticalError, s.events) == nvml.SUCCESS {
			d.capable |= SetOf(XID)
			registered++
		}
		s.devs = append(s.devs, d)
	}
	if registered == 0 && s.events != nil {
		s.events.Free()
		s.events = nil
	}
	return s, nil
}

// Name returns "nvml".
func (s *NVML) Name() string { return SourceNVML }

// Missing lists the fields no GPU of this machine can give.
func (s *NVML) Missing() []Field {
	var capable FieldSet
	for _, d := range s.devs {
		capable |= d.capable
	}
	return (AllFields &^ capable).Fields()
}

// Close frees GPM samples and the event set, then calls the Close option.
func (s *NVML) Close() error {
	for _, d := range s.devs {
		d.freeGPM()
	}
	if s.events != nil {
		s.events.Free()
		s.events = nil
	}
	if s.close != nil {
		return s.close()
	}
	return nil
}

// Sample reads every GPU. A call that fails leaves its field missing from
// that GPU's reading; NOT_SUPPORTED also stops asking for it.
func (s *NVML) Sample(ctx context.Context) (Sample, error) {
	if err := ctx.Err(); err != nil {
		return Sample{}, fmt.Errorf("sampling NVML: %w", err)
	}
	now := s.clk.Now()
	s.drainXIDs()
	out := Sample{Time: now, GPUs: make([]GPUSample, len(s.devs))}
	for i, d := range s.devs {
		s.sampleDevice(d, now, &out.GPUs[i])
	}
	return out, nil
}

func (s *NVML) sampleDevice(d *nvmlDevice, now time.Time, g *GPUSample) {
	g.UUID, g.Index = d.uuid, d.index
	dev := d.dev
	if d.want(GPUUtil) || d.want(MemCopyUtil) {
		u, ret := dev.GetUtilizationRates()
		if d.ok(ret, GPUUtil, MemCopyUtil) {
			g.Set(GPUUtil, float64(u.Gpu))
			g.Set(MemCopyUtil, float64(u.Memory))
		}
	}
	if d.want(FBUsed) {
		m, ret := dev.GetMemoryInfo()
		if d.ok(ret, FBUsed, FBTotal) {
			g.Set(FBUsed, float64(m.Used)/(1<<20))
			g.Set(FBTotal, float64(m.Total)/(1<<20))
		}
	}
	if d.want(Power) {
		mw, ret := dev.GetPowerUsage()
		if d.ok(ret, Power) {
			g.Set(Power, float64(mw)/1000)
		}
	}
	if d.want(Temp) {
		c, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU)
		if d.ok(ret, Temp) {
			g.Set(Temp, float64(c))
		}
	}
	if d.want(SMClock) {
		mhz, ret := dev.GetClockInfo(nvml.CLOCK_SM)
		if d.ok(ret, SMClock) {
			g.Set(SMClock, float64(mhz))
		}
	}
	if d.want(MemClock) {
		mhz, ret := dev.GetClockInfo(nvml.CLOCK_MEM)
		if d.ok(ret, MemClock) {
			g.Set(MemClock, float64(mhz))
		}
	}
	if d.want(ThrottleReasons) {
		r, ret := dev.GetCurrentClocksEventReasons()
		if d.ok(ret, ThrottleReasons) {
			g.Set(ThrottleReasons, float64(r))
		}
	}
	if d.capable.Has(XID) {
		g.Set(XID, d.xid)
	}
	if d.gpm {
		s.sampleGPM(d, g)
		return
	}
	if d.want(PCIeTX) {
		kbs, ret := dev.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES)
		if d.ok(ret, PCIeTX) {
			g.Set(PCIeTX, float64(kbs)*1024)
		}
	}
	if d.want(PCIeRX) {
		kbs, ret := dev.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES)
		if d.ok(ret, PCIeRX) {
			g.Set(PCIeRX, float64(kbs)*1024)
		}
	}
	if d.want(NVLinkTX) {
		d.sampleNVLink(now, g)
	}
}

// sampleGPM takes a GPM sample and, with the previous one, computes the
// GPM fields.
func (s *NVML) sampleGPM(d *nvmlDevice, g *GPUSample) {
	prev := d.samples[1-d.cur]
	primed := d.primed
	if !d.takeGPM() || !primed {
		return
	}
	m := &s.metrics
	m.NumMetrics = uint32(len(gpmFields))
	m.Sample1, m.Sample2 = prev, d.samples[1-d.cur]
	for i, f := range gpmFields {
		m.Metrics[i] = nvml.GpmMetric{MetricId: uint32(f.metric)}
	}
	if ret := s.lib.GpmMetricsGet(m); ret != nvml.SUCCESS {
		return
	}
	for i, f := range gpmFields {
		if r := m.Metrics[i]; r.NvmlReturn == uint32(nvml.SUCCESS) {
			g.Set(f.field, r.Value*f.scale)
		}
	}
}

// takeGPM reads a GPM sample into the current slot and advances it.
func (d *nvmlDevice) takeGPM() bool {
	if ret := d.dev.GpmSampleGet(d.samples[d.cur]); ret != nvml.SUCCESS {
		d.primed = false
		return false
	}
	d.cur, d.primed = 1-d.cur, true
	return true
}

func (d *nvmlDevice) freeGPM() {
	for j, sample := range d.samples {
		if sample != nil {
			sample.Free()
			d.samples[j] = nil
		}
	}
}

// sampleNVLink turns NVML's cumulative NVLink KiB counters into bytes per
// second since the previous sample.
func (d *nvmlDevice) sampleNVLink(now time.Time, g *GPUSample) {
	ret := d.dev.GetFieldValues(d.nvlink[:])
	if !d.ok(ret, NVLinkTX, NVLinkRX) {
		return
	}
	var cur [2]uint64
	for k, v := range d.nvlink {
		if nvml.Return(v.NvmlReturn) != nvml.SUCCESS {
			d.ok(nvml.Return(v.NvmlReturn), NVLinkTX, NVLinkRX)
			d.nvlinkOK = false
			return
		}
		cur[k] = fieldUint(v)
	}
	if d.nvlinkOK {
		if dt := now.Sub(d.nvlinkAt).Seconds(); dt > 0 && cur[0] >= d.nvlinkPrev[0] && cur[1] >= d.nvlinkPrev[1] {
			g.Set(NVLinkTX, float64(cur[0]-d.nvlinkPrev[0])*1024/dt)
			g.Set(NVLinkRX, float64(cur[1]-d.nvlinkPrev[1])*1024/dt)
		}
	}
	d.nvlinkPrev, d.nvlinkAt, d.nvlinkOK = cur, now, true
}

// fieldUint reads a field value NVML returned as an unsigned integer.
func fieldUint(v nvml.FieldValue) uint64 {
	b := v.Value
	switch nvml.ValueType(v.ValueType) {
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24
	default:
		return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	}
}

// drainXIDs records the XID events waiting, without blocking.
func (s *NVML) drainXIDs() {
	if s.events == nil {
		return
	}
	for range maxEventsPerSample {
		ev, ret := s.events.Wait(0)
		if ret != nvml.SUCCESS {
			return // TIMEOUT: none left
		}
		if ev.EventType&nvml.EventTypeXidCriticalError == 0 || ev.Device == nil {
			continue
		}
		uuid, ret := ev.Device.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		for _, d := range s.devs {
			if d.uuid == uuid {
				d.xid = float64(ev.EventData)
			}
		}
	}
}

// want reports whether d may give f.
func (d *nvmlDevice) want(f Field) bool { return d.capable.Has(f) }

// ok reports whether ret is success; NOT_SUPPORTED also removes fs from
// what d is asked for.
func (d *nvmlDevice) ok(ret nvml.Return, fs ...Field) bool {
	if ret == nvml.SUCCESS {
		return true
	}
	if ret == nvml.ERROR_NOT_SUPPORTED {
		d.capable &^= SetOf(fs...)
	}
	return false
}
