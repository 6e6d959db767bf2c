package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Metrics are the controller's Prometheus series. A nil *Metrics records
// nothing.
type Metrics struct {
	submittedTotal prometheus.Counter
	queueWaitHist  prometheus.Histogram
	timeToGPU      prometheus.Histogram
	preemptions    *prometheus.CounterVec
	alertsTotal    *prometheus.CounterVec
	eventsTotal    *prometheus.CounterVec
}

// NewMetrics registers the controller's series on reg. counts is read at
// scrape time for the jobs-by-state gauge.
func NewMetrics(reg prometheus.Registerer, counts func() map[model.JobState]int) *Metrics {
	m := &Metrics{
		submittedTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpufleet_jobs_submitted_total", Help: "Jobs accepted by the API.",
		}),
		queueWaitHist: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpufleet_queue_wait_seconds",
			Help:    "Time from entering the queue to being bound to GPUs.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 12), // 10 ms … ~46 h
		}),
		eventsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpufleet_events_total", Help: "Events recorded, by kind (launch, failover, notice, drain, requeue, terminate…).",
		}, []string{"kind"}),
		timeToGPU: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpufleet_time_to_gpu_seconds",
			Help:    "Time from submission to a job's first replica running on its GPUs.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 12),
		}),
		preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpufleet_preemptions_total", Help: "Attempts preempted, by the provider and region of their node.",
		}, []string{"provider", "region"}),
		alertsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpufleet_alerts_total", Help: "Alerts raised, by rule.",
		}, []string{"rule"}),
	}
	reg.MustRegister(m.timeToGPU, m.preemptions, m.alertsTotal)
	reg.MustRegister(m.submittedTotal, m.queueWaitHist, m.eventsTotal, jobsByState{counts: counts})
	return m
}

func (m *Metrics) submitted() {
	if m != nil {
		m.submittedTotal.Inc()
	}
}

func (m *Metrics) event(k model.EventKind) {
	if m != nil {
		m.eventsTotal.WithLabelValues(string(k)).Inc()
	}
}

func (m *Metrics) queueWait(d time.Duration) {
	if m != nil {
		m.queueWaitHist.Observe(d.Seconds())
	}
}

var jobsDesc = prometheus.NewDesc("gpufleet_jobs", "Jobs by state.", []string{"state"}, nil)

// jobsByState reads the counts when scraped, so the gauge is never stale.
type jobsByState struct{ counts func() map[model.JobState]int }

func (j jobsByState) Describe(ch chan<- *prometheus.Desc) { ch <- jobsDesc }

func (j jobsByState) Collect(ch chan<- prometheus.Metric) {
	counts := j.counts()
	for _, s := range model.JobStates {
		ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
}

func (m *Metrics) gpuReached(d time.Duration) {
	if m != nil {
		m.timeToGPU.Observe(d.Seconds())
	}
}

func (m *Metrics) preempted(provider, region string) {
	if m != nil {
		m.preemptions.WithLabelValues(provider, region).Inc()
	}
}

func (m *Metrics) alert(rule string) {
	if m != nil {
		m.alertsTotal.WithLabelValues(rule).Inc()
	}
}
