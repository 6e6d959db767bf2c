package api_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkAdviseHTTP ranks the whole catalog for each workload in
// examples/advise through POST /v1/advise on the real server over
// loopback, one request at a time, as a user's client sends it: YAML in,
// the 50 best rows as JSON out. Besides wall time per request it reports
// the process's CPU time per request (server and client), which a loaded
// machine inflates less. Target: < 50 ms (issue 19). Run it with
//
//	go test ./internal/api -run '^$' -bench AdviseHTTP -benchtime 20x
func BenchmarkAdviseHTTP(b *testing.B) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "advise", "*.yaml"))
	if err != nil || len(files) == 0 {
		b.Fatalf("no workloads in examples/advise: %v", err)
	}
	e := newEnv(b, envConfig{})
	client := e.http.Client()
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(filepath.Base(f), func(b *testing.B) {
			start, cpu0 := time.Now(), cpuTime(b)
			for b.Loop() {
				hr, err := http.NewRequest("POST", e.http.URL+"/v1/advise", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				hr.Header.Set("Authorization", "Bearer "+e.admin)
				hr.Header.Set("Content-Type", "application/yaml")
				resp, err := client.Do(hr)
				if err != nil {
					b.Fatal(err)
				}
				out, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || len(out) < 1000 {
					b.Fatalf("status %d, %d bytes, %v: %.200s", resp.StatusCode, len(out), err, out)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1e3/float64(b.N), "ms/req")
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/1e3/float64(b.N), "cpu-ms/req")
		})
	}
}
