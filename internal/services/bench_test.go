package services

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// BenchmarkProxyOverhead sends b.N completions from 1 and from 64
// concurrent connections to one replica, directly and through the proxy,
// over real loopback HTTP, and reports the latency percentiles of both and
// the proxy's requests per second.
func BenchmarkProxyOverhead(b *testing.B) {
	for _, workers := range []int{1, 64} {
		b.Run(fmt.Sprintf("conns=%d", workers), func(b *testing.B) { benchProxy(b, workers) })
	}
}

func benchProxy(b *testing.B, workers int) {
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
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
	run := func(url string) ([]time.Duration, time.Duration) {
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		start := time.Now()
		n := b.N
		per := max(n/workers, 1)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := make([]time.Duration, 0, per)
				for range per {
					t0 := time.Now()
					resp, err := client.Post(url, "application/json", strings.NewReader(`{"prompt":"hello there","max_tokens":16}`))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		slices.Sort(lat)
		return lat, time.Since(start)
	}
	pct := func(l []time.Duration, p float64) float64 {
		return float64(l[min(int(float64(len(l))*p), len(l)-1)].Microseconds())
	}
	run(direct) // warm both paths' connections
	run(proxied)
	b.ResetTimer()
	d, _ := run(direct)
	p, elapsed := run(proxied)
	b.StopTimer()
	b.ReportMetric(pct(d, .5), "direct-p50-µs")
	b.ReportMetric(pct(d, .99), "direct-p99-µs")
	b.ReportMetric(pct(p, .5), "proxy-p50-µs")
	b.ReportMetric(pct(p, .99), "proxy-p99-µs")
	b.ReportMetric(float64(len(p))/elapsed.Seconds(), "proxy-req/s")
}
