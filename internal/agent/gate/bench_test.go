package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"

	"github.com/gpufleet/gpufleet/internal/testutil"
)

// BenchmarkGateOverhead sends b.N completions from 1 and from 64
// concurrent connections to a replica (a net/http server answering a small
// JSON completion with usage), directly and through a gate in front of it,
// over real loopback HTTP, and reports both paths' latency percentiles and
// the gate's requests per second. The gate dials the replica on loopback
// here; on a node it dials into the replica's namespace, once per
// connection (kept alive), so the per-request cost is the same.
func BenchmarkGateOverhead(b *testing.B) {
	for _, workers := range []int{1, 64} {
		b.Run(fmt.Sprintf("conns=%d", workers), func(b *testing.B) { benchGate(b, workers) })
	}
}

func benchGate(b *testing.B, workers int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	replica := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Prompt string `json:"prompt"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"text": "hi", "index": 0}},
			"usage": map[string]int{"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}})
	})}
	go replica.Serve(ln)
	defer replica.Close()
	g, err := Open(Config{Addr: "127.0.0.1:0", Key: key, Dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	load := testutil.Load{
		Client:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}},
		Workers: workers, N: b.N, Body: `{"prompt":"hello there","max_tokens":16}`,
		Header: http.Header{"Authorization": {"Bearer " + key}},
	}
	direct := "http://" + ln.Addr().String() + "/v1/completions"
	gated := "http://" + g.Addr().String() + "/v1/completions"
	load.Run(b, direct) // warm both paths' connections
	load.Run(b, gated)
	b.ResetTimer()
	d, _ := load.Run(b, direct)
	p, elapsed := load.Run(b, gated)
	b.StopTimer()
	b.ReportMetric(testutil.Micros(d, .5), "direct-p50-µs")
	b.ReportMetric(testutil.Micros(d, .99), "direct-p99-µs")
	b.ReportMetric(testutil.Micros(p, .5), "gate-p50-µs")
	b.ReportMetric(testutil.Micros(p, .99), "gate-p99-µs")
	b.ReportMetric(float64(len(p))/elapsed.Seconds(), "gate-req/s")
}
