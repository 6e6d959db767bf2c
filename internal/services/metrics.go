package services

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus series.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	tokens   *prometheus.CounterVec
	replicas func() (map[[2]string]int, map[string]float64) // set by New
	desc     *prometheus.Desc
	costDesc *prometheus.Desc
}

// NewMetrics registers gpufleet_service_requests_total{service,code},
// gpufleet_service_request_duration_seconds{service},
// gpufleet_service_tokens_total{service},
// gpufleet_service_replicas{service,state} and
// gpufleet_service_cost_per_hour_dollars{service} with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpufleet_service_requests_total",
			Help: "Requests the service proxy answered, by service and status code."}, []string{"service", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gpufleet_service_request_duration_seconds",
			Help:    "Time from a request reaching the proxy to its response ending, by service.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}}, []string{"service"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpufleet_service_tokens_total",
			Help: "Tokens replicas reported in OpenAI-style usage (total_tokens), by service."}, []string{"service"}),
		desc: prometheus.NewDesc("gpufleet_service_replicas", "Service replicas by state.", []string{"service", "state"}, nil),
		costDesc: prometheus.NewDesc("gpufleet_service_cost_per_hour_dollars",
			"What a service's running replicas cost now, in dollars per hour: their share of their nodes' prices.", []string{"service"}, nil),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.tokens, m} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Describe implements prometheus.Collector for the replica gauge.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) { ch <- m.desc; ch <- m.costDesc }

// Collect implements prometheus.Collector for the replica gauge.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	if m.replicas == nil {
		return
	}
	counts, perHour := m.replicas()
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	for service, d := range perHour {
		ch <- prometheus.MustNewConstMetric(m.costDesc, prometheus.GaugeValue, d, service)
	}
}

func (m *Metrics) observe(service string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(service, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(service).Observe(d.Seconds())
}

// touch makes service's token counter exist at 0, so a service that has
// counted none yet has the series (a dashboard's rate reads 0, not nothing).
func (m *Metrics) touch(service string) {
	if m != nil {
		m.tokens.WithLabelValues(service)
	}
}

func (m *Metrics) addTokens(service string, n int64) {
	if m != nil && n > 0 {
		m.tokens.WithLabelValues(service).Add(float64(n))
	}
}
