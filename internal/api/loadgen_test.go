package api_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// LoadConfig describes a submission load.
type LoadConfig struct {
	// URL is the server's base URL and Token a user token's secret.
	URL, Token string
	// Jobs is how many submissions to send in all, by Concurrency
	// goroutines sharing Client.
	Jobs, Concurrency int
	Client            *http.Client
	// KeyPrefix makes the Idempotency-Keys of one run unique among runs
	// against the same server.
	KeyPrefix string
}

// LoadResult is what a load run measured.
type LoadResult struct {
	Jobs    int
	Elapsed time.Duration
	// Latencies of every request, sorted.
	Latencies []time.Duration
	// Statuses counts responses by HTTP status.
	Statuses map[int]int
}

// JobsPerSecond is the submission throughput.
func (r LoadResult) JobsPerSecond() float64 { return float64(r.Jobs) / r.Elapsed.Seconds() }

// Percentile returns the latency below which a fraction p of requests fell.
func (r LoadResult) Percentile(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(p*float64(len(r.Latencies))+0.5) - 1
	return r.Latencies[min(max(i, 0), len(r.Latencies)-1)]
}

// NewLoadClient is an HTTP client that keeps a connection per load goroutine.
func NewLoadClient(concurrency int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        concurrency,
		MaxIdleConnsPerHost: concurrency,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// loadManifest returns a realistic submission of about 600 bytes: one H100,
// a training command with arguments, environment and tags. i makes the
// name unique.
func loadManifest(buf []byte, i int) []byte {
	buf = append(buf, `{"apiVersion":"gpufleet.dev/v1","kind":"Job","metadata":{"name":"sweep-lr-`...)
	buf = strconv.AppendInt(buf, int64(i), 10)
	buf = append(buf, `","project":"nlp","tags":{"team":"nlp","experiment":"lr-sweep","owner":"alice"}},`+
		`"spec":{"priority":"normal","resources":{"gpus":1,"gpu":{"models":["H100"],"minMemory":"80Gi"},"cpu":8,"memory":"64Gi"},`+
		`"run":{"command":["torchrun","--nproc-per-node=1","train.py","--config","llama-7b.yaml","--lr","3e-4","--epochs","3"],`+
		`"workdir":"/workspace/llm-finetune","env":{"HF_HOME":"/cache/huggingface","WANDB_PROJECT":"lr-sweep","NCCL_DEBUG":"WARN"}},`+
		`"spot":"allowed","checkpoint":{"interval":"30m","signal":"SIGTERM","grace":"120s"},"retries":{"failures":2},"limits":{"runtime":"12h"}}}`...)
	return buf
}

// SubmitLoad posts cfg.Jobs job manifests to cfg.URL from cfg.Concurrency
// goroutines, each with its own Idempotency-Key, and measures every
// request. It returns an error only if a request could not be made; the
// caller judges the statuses.
//
// The BenchmarkSubmitHTTP figures are reproduced with
//
//	go test ./internal/api -run '^$' -bench SubmitHTTP -benchtime 20000x -count 3
func SubmitLoad(ctx context.Context, cfg LoadConfig) (LoadResult, error) {
	lat := make([]time.Duration, cfg.Jobs)
	codes := make([]int, cfg.Jobs)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Concurrency)
	start := time.Now()
	for range cfg.Concurrency {
		wg.Go(func() {
			var body []byte
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Jobs {
					return
				}
				body = loadManifest(body[:0], i)
				req, err := http.NewRequestWithContext(ctx, "POST", cfg.URL+"/v1/jobs", bytes.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				req.Header.Set("Authorization", "Bearer "+cfg.Token)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(api.IdempotencyHeader, cfg.KeyPrefix+strconv.Itoa(i))
				t0 := time.Now()
				resp, err := cfg.Client.Do(req)
				if err != nil {
					errs <- fmt.Errorf("submission %d: %w", i, err)
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat[i] = time.Since(t0)
				codes[i] = resp.StatusCode
				if err != nil {
					errs <- fmt.Errorf("submission %d: reading response: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	res := LoadResult{Jobs: cfg.Jobs, Elapsed: elapsed, Latencies: lat, Statuses: map[int]int{}}
	slices.Sort(res.Latencies)
	for _, c := range codes {
		res.Statuses[c]++
	}
	return res, errors.Join(all...)
}

// BenchmarkSubmitHTTP measures job submission end to end: 64 clients on
// loopback, the real server with the SQLite store committing durably
// (WAL, synchronous FULL) in a temp dir, every job acknowledged only once
// it is on disk. Run it with
//
//	go test ./internal/api -run '^$' -bench SubmitHTTP -benchtime 20000x -count 3
//
// The target is ≥ 5,000 jobs/s with p99 < 50 ms; see BENCHMARKS.md.
func BenchmarkSubmitHTTP(b *testing.B) {
	const concurrency = 64
	e := newEnv(b, envConfig{})
	hc := NewLoadClient(concurrency)
	defer hc.CloseIdleConnections()
	b.ReportAllocs()
	before, cpuBefore := e.store.Stats(), cpuTime(b)
	commitsBefore, commitSecondsBefore := e.commitSeconds(b)
	b.ResetTimer()
	res, err := SubmitLoad(context.Background(), LoadConfig{
		URL: e.http.URL, Token: e.admin, Jobs: b.N, Concurrency: concurrency, Client: hc, KeyPrefix: "bench-",
	})
	b.StopTimer()
	after, cpuAfter := e.store.Stats(), cpuTime(b)
	commitsAfter, commitSecondsAfter := e.commitSeconds(b)
	if err != nil {
		b.Fatal(err)
	}
	if res.Statuses[http.StatusCreated] != b.N {
		b.Fatalf("statuses %v, want %d × 201", res.Statuses, b.N)
	}
	held := 0
	for _, n := range e.ctrl.JobCounts() {
		held += n
	}
	if held != b.N {
		b.Fatalf("controller holds %d jobs, want %d", held, b.N)
	}
	b.ReportMetric(res.JobsPerSecond(), "jobs/s")
	b.ReportMetric(float64(res.Percentile(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(res.Percentile(0.99).Microseconds())/1000, "p99-ms")
	// How well the store groups commits (each is one fsync), and what one
	// costs: the disk's share of the latency.
	if commits := after.Commits - before.Commits; commits > 0 {
		b.ReportMetric(float64(after.Batches-before.Batches)/float64(commits), "batches/commit")
	}
	if n := commitsAfter - commitsBefore; n > 0 {
		b.ReportMetric((commitSecondsAfter-commitSecondsBefore)/float64(n)*1000, "commit-ms")
	}
	// CPU time of the whole process (server and load generator) per job:
	// unlike jobs/s it does not depend on what else the machine runs.
	b.ReportMetric(float64((cpuAfter-cpuBefore).Microseconds())/float64(b.N), "cpu-µs/job")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// commitSeconds reads the store commit histogram's count and sum.
func (e *testEnv) commitSeconds(tb testing.TB) (uint64, float64) {
	tb.Helper()
	fams, err := e.reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "gpufleet_store_commit_seconds" {
			h := f.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	tb.Fatal("no gpufleet_store_commit_seconds in the registry")
	return 0, 0
}

// TestSubmitLoad runs the load generator at a small scale so that it, and
// the server under concurrent submission, stay tested by `go test`.
func TestSubmitLoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	const jobs, concurrency = 300, 16
	if n := len(loadManifest(nil, 12345)); n < 550 || n > 700 {
		t.Errorf("load manifest is %d bytes, want about 600", n)
	}
	hc := NewLoadClient(concurrency)
	defer hc.CloseIdleConnections()
	res, err := SubmitLoad(context.Background(), LoadConfig{URL: e.http.URL, Token: e.admin, Jobs: jobs, Concurrency: concurrency, Client: hc, KeyPrefix: "t-"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Statuses[http.StatusCreated] != jobs {
		t.Fatalf("statuses %v, want %d × 201", res.Statuses, jobs)
	}
	if got := e.ctrl.JobCounts()[model.JobQueued]; got != jobs {
		t.Errorf("controller holds %d queued jobs, want %d", got, jobs)
	}
	// Retrying the whole run returns the same jobs: 200s, nothing new.
	again, err := SubmitLoad(context.Background(), LoadConfig{URL: e.http.URL, Token: e.admin, Jobs: jobs, Concurrency: concurrency, Client: hc, KeyPrefix: "t-"})
	if err != nil {
		t.Fatal(err)
	}
	if again.Statuses[http.StatusOK] != jobs {
		t.Errorf("retried run: statuses %v, want %d × 200", again.Statuses, jobs)
	}
	if got := e.ctrl.JobCounts()[model.JobQueued]; got != jobs {
		t.Errorf("after retries the controller holds %d queued jobs, want %d", got, jobs)
	}
}
