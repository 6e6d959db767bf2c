package services

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// BenchmarkProxyOverhead sends b.N completions from 1 and from 64
// concurrent connections to one replica, directly and through the proxy,
// over real loopback HTTP, and reports the latency percentiles of both and
// the proxy's requests per second.
func BenchmarkProxyOverhead(b *testing.B) {
	for _, workers := range []int{1, 64} {
		b.Run(fmt.Sprintf("conns=%d", workers), func(b *testing.B) { benchProxy(b, workers, false) })
	}
}

// BenchmarkSeparateProxyOverhead is BenchmarkProxyOverhead through the
// server's proxy and through a separate proxy (Remote, following the
// server's endpoint list and reporting its load every second, as
// `gpufleet proxy` does) in turn, on the same replica, so the two compare
// on one machine at one load.
func BenchmarkSeparateProxyOverhead(b *testing.B) {
	for _, workers := range []int{1, 64} {
		b.Run(fmt.Sprintf("conns=%d", workers), func(b *testing.B) { benchProxy(b, workers, true) })
	}
}

func benchProxy(b *testing.B, workers int, separate bool) {
	f := newFake(b)
	m, srv, _ := startManager(b, f)
	s := testService(b, "bench", 1, 1)
	s.Spec.Autoscaling = model.ServiceAutoscaling{}
	s.Spec.Replicas.Target = 1
	s.Spec.Default()
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, _ := m.Get("bench"); st.Ready == 1 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no ready replica")
		}
	}
	direct := fmt.Sprintf("http://127.0.0.1:%d/v1/completions", s.Spec.Port)
	proxied := srv.URL + "/services/bench/v1/completions"
	var remote string
	if separate {
		r := NewRemote(RemoteConfig{Server: &directServer{m: m}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		rs := httptest.NewServer(r)
		b.Cleanup(func() { rs.Close(); cancel(); <-done })
		for deadline := time.Now().Add(10 * time.Second); !r.ready.Load(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatal("the separate proxy read no table")
			}
		}
		remote = rs.URL + "/services/bench/v1/completions"
	}
	load := testutil.Load{
		Client:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}},
		Workers: workers, N: b.N, Body: `{"prompt":"hello there","max_tokens":16}`,
	}
	load.Run(b, direct) // warm every path's connections
	load.Run(b, proxied)
	if separate {
		load.Run(b, remote)
	}
	b.ResetTimer()
	d, _ := load.Run(b, direct)
	p, elapsed := load.Run(b, proxied)
	var sep []time.Duration
	var sepElapsed time.Duration
	if separate {
		sep, sepElapsed = load.Run(b, remote)
	}
	b.StopTimer()
	pct := testutil.Micros
	b.ReportMetric(pct(d, .5), "direct-p50-µs")
	b.ReportMetric(pct(d, .99), "direct-p99-µs")
	b.ReportMetric(pct(p, .5), "proxy-p50-µs")
	b.ReportMetric(pct(p, .99), "proxy-p99-µs")
	b.ReportMetric(float64(len(p))/elapsed.Seconds(), "proxy-req/s")
	if separate {
		b.ReportMetric(pct(sep, .5), "separate-p50-µs")
		b.ReportMetric(pct(sep, .99), "separate-p99-µs")
		b.ReportMetric(float64(len(sep))/sepElapsed.Seconds(), "separate-req/s")
	}
}
