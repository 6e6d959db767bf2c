package testutil

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Load is a bounded HTTP load loop for benchmarks: Workers goroutines
// each POST Body to a URL until N requests are sent in all, over Client.
type Load struct {
	Client  *http.Client
	Workers int
	N       int
	Body    string
	Header  http.Header
}

// Run sends the load to url and returns every request's latency, sorted,
// and the wall time of the whole run. A failed request fails tb.
func (l Load) Run(tb testing.TB, url string) ([]time.Duration, time.Duration) {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	per := max(l.N/l.Workers, 1)
	for range l.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, per)
			for range per {
				req, _ := http.NewRequest("POST", url, strings.NewReader(l.Body))
				for k, v := range l.Header {
					req.Header[k] = v
				}
				t0 := time.Now()
				resp, err := l.Client.Do(req)
				if err != nil {
					tb.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					tb.Errorf("%s: %s", url, resp.Status)
					return
				}
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

// Micros is the p-quantile (0–1) of sorted latencies, in microseconds.
func Micros(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[min(int(float64(len(sorted))*p), len(sorted)-1)].Microseconds())
}
