package controller

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/efficiency"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Per-GPU series are labelled by node id and GPU index; per-job series by
// job id only, and only for live attempts with telemetry, so label sets
// stay bounded by the fleet's size and never carry user input.
var (
	gpuSMActiveDesc = prometheus.NewDesc("gpufleet_gpu_sm_active", "SM active ratio of a GPU (DCGM_FI_PROF_SM_ACTIVE), 0-1, newest sample.", []string{"node", "gpu"}, nil)
	gpuUtilDesc     = prometheus.NewDesc("gpufleet_gpu_utilization_ratio", "GPU utilisation (DCGM_FI_DEV_GPU_UTIL) as a ratio, newest sample.", []string{"node", "gpu"}, nil)
	gpuMemDesc      = prometheus.NewDesc("gpufleet_gpu_memory_used_bytes", "Framebuffer memory in use, newest sample.", []string{"node", "gpu"}, nil)
	gpuPowerDesc    = prometheus.NewDesc("gpufleet_gpu_power_watts", "GPU power draw, newest sample.", []string{"node", "gpu"}, nil)
	jobSMActiveDesc = prometheus.NewDesc("gpufleet_job_sm_active", "Mean SM active ratio of a running job's GPUs over the classification window.", []string{"job"}, nil)
	jobIdleDesc     = prometheus.NewDesc("gpufleet_job_idle_seconds", "How long a running job's GPUs have been below the idle threshold (0 when not idle).", []string{"job"}, nil)
	jobCostDesc     = prometheus.NewDesc("gpufleet_job_cost_dollars", "Allocated cost of a running job's attempt so far.", []string{"job"}, nil)
	jobEffCostDesc  = prometheus.NewDesc("gpufleet_job_effective_cost_dollars", "Allocated cost times SM active: the part of the cost that bought GPU work.", []string{"job"}, nil)
)

// TelemetryCollector returns the GPU and per-job efficiency series, read
// from the controller at scrape time.
func (c *Controller) TelemetryCollector() prometheus.Collector { return telemetryCollector{c} }

type telemetryCollector struct{ c *Controller }

func (t telemetryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{gpuSMActiveDesc, gpuUtilDesc, gpuMemDesc, gpuPowerDesc, jobSMActiveDesc, jobIdleDesc, jobCostDesc, jobEffCostDesc} {
		ch <- d
	}
}

func (t telemetryCollector) Collect(ch chan<- prometheus.Metric) {
	c := t.c
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	type nodeSample struct {
		node string
		s    agentapi.TelemetrySample
	}
	var samples []nodeSample
	c.tel.EachLatest(func(node string, s agentapi.TelemetrySample) { samples = append(samples, nodeSample{node, s}) })
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ns := range samples {
		node, s := ns.node, ns.s
		if n, ok := c.st.Node(node); !ok || n.State == model.NodeLost {
			continue
		}
		for _, g := range s.GPUs {
			idx := strconv.Itoa(g.Index)
			if v, ok := g.Values[fieldSMActive]; ok {
				gauge(gpuSMActiveDesc, v, node, idx)
			}
			if v, ok := g.Values["DCGM_FI_DEV_GPU_UTIL"]; ok {
				gauge(gpuUtilDesc, v/100, node, idx)
			}
			if v, ok := g.Values["DCGM_FI_DEV_FB_USED"]; ok {
				gauge(gpuMemDesc, v*(1<<20), node, idx)
			}
			if v, ok := g.Values["DCGM_FI_DEV_POWER_USAGE"]; ok {
				gauge(gpuPowerDesc, v, node, idx)
			}
		}
	}
	now := c.cfg.Clock.Now()
	c.st.EachLiveAttempt(func(a *model.Attempt) {
		v, ok := c.tel.Verdict(a.ID)
		if !ok {
			return
		}
		sm := v.Summary.SMActive
		if !math.IsNaN(sm) {
			gauge(jobSMActiveDesc, sm, a.JobID)
		}
		idle := 0.0
		if v.Class == efficiency.Idle && !v.IdleSince.IsZero() {
			idle = now.Sub(v.IdleSince).Seconds()
		}
		gauge(jobIdleDesc, idle, a.JobID)
		if cost, ok := c.allocatedCostLocked(a, now); ok {
			gauge(jobCostDesc, float64(cost)/1e6, a.JobID)
			if !math.IsNaN(sm) {
				gauge(jobEffCostDesc, float64(efficiency.EffectiveCost(cost, sm))/1e6, a.JobID)
			}
		}
	})
}
