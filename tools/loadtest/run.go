package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Result is what one run measured. Durations are in seconds; a time "after
// the last submit" is -1 when the state was not reached before the timeout.
type Result struct {
	Mode        string  `json:"mode"` // "virtual-agents" or "local-agent"
	Nodes       int     `json:"nodes"`
	Jobs        int     `json:"jobs"`
	Clients     int     `json:"clients"`
	JobDuration float64 `json:"jobDurationSeconds"`
	// GPUCapacity is how many jobs fit at once (virtual nodes); with more
	// jobs than that, the rest are placed only as others exit.
	JobsFitAtOnce int `json:"jobsFitAtOnce,omitempty"`

	SubmitSeconds  float64     `json:"submitSeconds"`
	SubmitsPerSec  float64     `json:"submitsPerSecond"`
	SubmitP50ms    float64     `json:"submitP50Ms"`
	SubmitP99ms    float64     `json:"submitP99Ms"`
	SubmitStatuses map[int]int `json:"submitStatuses"`

	PlacedAfterLastSubmit    float64 `json:"placedAfterLastSubmitSeconds"`
	SucceededAfterLastSubmit float64 `json:"succeededAfterLastSubmitSeconds"`
	// QueueWaitP50/P99: from a job's submit answer to an agent first
	// receiving it (virtual agents only).
	QueueWaitP50 float64        `json:"queueWaitP50Seconds,omitempty"`
	QueueWaitP99 float64        `json:"queueWaitP99Seconds,omitempty"`
	FinalStates  map[string]int `json:"finalStates"`

	DoubleRuns DoubleRuns `json:"doubleRuns"`

	// Commits, BatchesPerCommit and CommitMs are the store's group
	// commits while submitting (the server's commit histograms): how
	// many submissions shared a transaction, and its mean latency.
	Commits          int     `json:"commits"`
	BatchesPerCommit float64 `json:"batchesPerCommit"`
	CommitMs         float64 `json:"commitMs"`

	ServerPeakRSSMB  float64 `json:"serverPeakRssMB"`
	ServerCPUSeconds float64 `json:"serverCpuSeconds"`
	// ServerSysCPUSeconds is the kernel's part of ServerCPUSeconds (log
	// and checkpoint folders, files, fsyncs): on a shared disk it moves
	// with the other load more than the rest.
	ServerSysCPUSeconds float64 `json:"serverSysCpuSeconds"`
	// ServerCPU by phase: submitting, then until all placed, then until
	// all succeeded.
	ServerCPUSubmit float64 `json:"serverCpuSubmitSeconds"`
	// StoreCPUSubmit is the database server's CPU while submitting
	// (--store-pid), its backends' included. CPU per 1,000 submissions
	// of either does not depend on the machine's other load as much as
	// submissions/s does.
	StoreCPUSubmit   float64 `json:"storeCpuSubmitSeconds,omitempty"`
	ServerCPUPer1000 float64 `json:"serverCpuSecondsPer1000"`
	StoreCPUPer1000  float64 `json:"storeCpuSecondsPer1000,omitempty"`
	ServerCPUPlace   float64 `json:"serverCpuPlaceSeconds"`
	ServerCPUFinish  float64 `json:"serverCpuFinishSeconds"`
	HarnessCPU       float64 `json:"harnessCpuSeconds"`
	WallSeconds      float64 `json:"wallSeconds"`
	TimedOut         bool    `json:"timedOut"`
	DataDir          string  `json:"dataDir,omitempty"`
	ServerPID        int     `json:"serverPid"`
	ServerLogWarning int     `json:"serverLogWarnings"`
}

// DoubleRuns counts work that ran twice.
type DoubleRuns struct {
	// Total is what the target counts: jobs with two attempts running at
	// once as the agents saw them (virtual agents), or with more than one
	// started replica on the local agent, plus replica ids started twice,
	// plus jobs whose record shows a second attempt started before the
	// first's end.
	Total int `json:"total"`
	// AgentOverlaps: jobs an agent ran two attempts of at once (virtual),
	// or that the local agent started more than once.
	AgentOverlaps int `json:"agentOverlaps"`
	// ReplicaIDsTwice: replica ids started more than once.
	ReplicaIDsTwice int `json:"replicaIdsStartedTwice"`
	// RecordOverlaps: jobs whose attempts, as the server recorded them,
	// overlap (a later one started before the earlier one's recorded end,
	// or the earlier one has no end).
	RecordOverlaps int `json:"recordOverlaps"`
	// Requeued: jobs with more than one attempt (not a double run by
	// itself: a lost node's work may have been stopped first).
	Requeued int `json:"requeued"`
}

// Run does one load run; the Result is returned even with an error where
// something was measured.
func Run(ctx context.Context, c Config) (*Result, error) {
	c.defaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	raiseFileLimit()
	dir, err := os.MkdirTemp("", "gpufleet-loadtest-")
	if err != nil {
		return nil, err
	}
	if !c.KeepDir {
		defer os.RemoveAll(dir)
	}
	// Workload users of the local agent (as root) must pass through to
	// the work root inside it.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(c.Log, "%6.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	bin := c.Binary
	if bin == "" {
		logf("building gpufleet")
		if bin, err = buildBinary(ctx, dir); err != nil {
			return nil, err
		}
	}
	if c.SubmitOnly {
		c.Nodes = 0
	}
	srv, err := startServer(ctx, bin, dir, c.Nodes == 0 && !c.SubmitOnly, c.Store)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	pid := srv.cmd.Process.Pid
	res := &Result{Nodes: c.Nodes, Jobs: c.Jobs, Clients: c.Clients, JobDuration: c.JobDuration.Seconds(), ServerPID: pid,
		PlacedAfterLastSubmit: -1, SucceededAfterLastSubmit: -1}
	if c.KeepDir {
		res.DataDir = dir
	}
	logf("server %d up at %s", pid, srv.url)

	hc := &http.Client{Transport: &http.Transport{
		Proxy: nil, MaxIdleConns: c.Clients + 2*c.Nodes + 16, MaxIdleConnsPerHost: c.Clients + 2*c.Nodes + 16,
		IdleConnTimeout: 90 * time.Second,
	}}
	admin := client.New(srv.url, srv.admin, hc)

	var (
		tr       = newTracker(c.Jobs)
		agentsWG sync.WaitGroup
	)
	agentsCtx, stopAgents := context.WithCancel(ctx)
	defer func() { stopAgents(); agentsWG.Wait() }()
	switch {
	case c.SubmitOnly:
		res.Mode = "submit-only"
	case c.Nodes > 0:
		res.Mode = "virtual-agents"
		if c.JobGPUs > 0 {
			res.JobsFitAtOnce = c.Nodes * (c.GPUsPerNode / c.JobGPUs)
		}
		nodes, err := startVirtualNodes(agentsCtx, &c, srv.url, admin, hc, tr, &agentsWG)
		if err != nil {
			return res, err
		}
		logf("%d virtual agents registered", nodes)
	default:
		res.Mode = "local-agent"
		if err := waitLocalNode(ctx, admin); err != nil {
			return res, err
		}
		logf("local agent registered")
	}

	// Submissions.
	cpu0, _ := readProc(pid)
	var storeCPU0, storeCPU1 time.Duration
	if c.StorePID > 0 {
		if storeCPU0, err = treeCPU(c.StorePID); err != nil {
			return res, fmt.Errorf("--store-pid: %w", err)
		}
	}
	commits0, errCommits := readStoreCommits(ctx, hc, srv.url, srv.admin)
	sub := submit(ctx, &c, srv.url, srv.admin, hc, tr)
	lastSubmit := time.Now()
	cpu1, _ := readProc(pid)
	if c.StorePID > 0 {
		if storeCPU1, err = treeCPU(c.StorePID); err == nil && sub.ok > 0 {
			res.StoreCPUSubmit = (storeCPU1 - storeCPU0).Seconds()
			res.StoreCPUPer1000 = res.StoreCPUSubmit / float64(sub.ok) * 1000
		}
	}
	if commits1, err := readStoreCommits(ctx, hc, srv.url, srv.admin); err == nil && errCommits == nil && commits1.Commits > commits0.Commits {
		n := commits1.Commits - commits0.Commits
		res.Commits = int(n)
		res.BatchesPerCommit = (commits1.Batches - commits0.Batches) / n
		res.CommitMs = (commits1.Seconds - commits0.Seconds) / n * 1000
	}
	res.SubmitSeconds = sub.elapsed.Seconds()
	res.SubmitsPerSec = float64(sub.ok) / sub.elapsed.Seconds()
	res.SubmitP50ms = ms(percentile(sub.latencies, 0.50))
	res.SubmitP99ms = ms(percentile(sub.latencies, 0.99))
	res.SubmitStatuses = sub.statuses
	res.ServerCPUSubmit = (cpu1.CPU - cpu0.CPU).Seconds()
	if sub.ok > 0 {
		res.ServerCPUPer1000 = res.ServerCPUSubmit / float64(sub.ok) * 1000
	}
	logf("submitted %d jobs in %.2fs (%.0f/s, p50 %.1f ms, p99 %.1f ms), statuses %v",
		sub.ok, sub.elapsed.Seconds(), res.SubmitsPerSec, res.SubmitP50ms, res.SubmitP99ms, sub.statuses)
	if sub.ok != c.Jobs {
		return res, fmt.Errorf("%d of %d submissions failed: %v; first refusal: %s", c.Jobs-sub.ok, c.Jobs, sub.statuses, sub.refusal)
	}
	if c.SubmitOnly {
		return res, finishSubmitOnly(ctx, res, c, hc, srv, began)
	}

	// Placement and completion: virtual agents see both themselves (a job
	// is placed when an agent first receives it, done when the server no
	// longer lists its replica after the agent reported it exited 0);
	// with the local agent the server's jobs-by-state gauge says.
	var placedAt, doneAt time.Time
	cpuPlaced := cpu1
	markPlaced := func(at time.Time) {
		placedAt = at
		cpuPlaced, _ = readProc(pid)
		res.PlacedAfterLastSubmit = placedAt.Sub(lastSubmit).Seconds()
		logf("all placed %.2fs after the last submit", res.PlacedAfterLastSubmit)
	}
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	poll := time.NewTicker(250 * time.Millisecond) // local agent: the gauge's sampling period
	defer poll.Stop()
	placedC, doneC := tr.allPlaced, tr.allDone
	for ctx.Err() == nil && doneAt.IsZero() {
		select {
		case <-ctx.Done():
		case <-placedC:
			placedC = nil
			markPlaced(tr.placedBy(lastSubmit))
		case <-doneC:
			doneAt = time.Now()
			if placedAt.IsZero() { // both came at once
				markPlaced(tr.placedBy(lastSubmit))
			}
		case <-progress.C:
			if cs, err := jobCounts(ctx, hc, srv.url, srv.admin); err == nil {
				logf("jobs by state: %v", cs)
			}
		case <-poll.C:
			if c.Nodes > 0 {
				continue
			}
			// The jobs-by-state gauge: cheap on a node without GPUs (a
			// filtered job list would clone every queued job).
			cs, err := jobCounts(ctx, hc, srv.url, srv.admin)
			if err != nil {
				continue
			}
			now := time.Now()
			if placedAt.IsZero() && cs[string(model.JobQueued)] == 0 {
				markPlaced(now)
			}
			if !placedAt.IsZero() && ended(cs) >= c.Jobs {
				doneAt = now
			}
		}
	}
	counts, err := jobCounts(context.WithoutCancel(ctx), hc, srv.url, srv.admin)
	if err != nil {
		logf("reading the final job counts: %v", err)
	}
	cpuDone, _ := readProc(pid)
	if !placedAt.IsZero() {
		res.ServerCPUPlace = (cpuPlaced.CPU - cpu1.CPU).Seconds()
		res.ServerCPUFinish = (cpuDone.CPU - cpuPlaced.CPU).Seconds()
	}
	res.FinalStates = counts
	if !doneAt.IsZero() && counts[string(model.JobSucceeded)] >= c.Jobs {
		res.SucceededAfterLastSubmit = doneAt.Sub(lastSubmit).Seconds()
		logf("all succeeded %.2fs after the last submit", res.SucceededAfterLastSubmit)
	}
	res.TimedOut = doneAt.IsZero()
	res.ServerPeakRSSMB = float64(cpuDone.PeakRSS) / (1 << 20)
	res.ServerCPUSeconds = cpuDone.CPU.Seconds()
	res.ServerSysCPUSeconds = cpuDone.SysCPU.Seconds()

	// Double runs. The checks read the server after the timer stopped.
	checkCtx, checkCancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer checkCancel()
	tr.mu.Lock()
	res.DoubleRuns.AgentOverlaps = len(tr.doubleJobs)
	res.DoubleRuns.ReplicaIDsTwice = tr.twice
	waits := make([]time.Duration, 0, len(tr.placedAt))
	for id, at := range tr.placedAt {
		if s, ok := sub.answered[id]; ok {
			waits = append(waits, max(at.Sub(s), 0))
		}
	}
	tr.mu.Unlock()
	if c.Nodes > 0 {
		slices.Sort(waits)
		res.QueueWaitP50 = percentile(waits, 0.50).Seconds()
		res.QueueWaitP99 = percentile(waits, 0.99).Seconds()
	} else {
		res.DoubleRuns.AgentOverlaps = localDoubleStarts(filepath.Join(srv.dataDir, "agent", "replicas"))
	}
	requeued, overlaps, err := recordDoubleRuns(checkCtx, admin, c.Jobs)
	if err != nil {
		logf("reading the jobs' attempts: %v", err)
	}
	res.DoubleRuns.Requeued, res.DoubleRuns.RecordOverlaps = requeued, overlaps
	res.DoubleRuns.Total = res.DoubleRuns.AgentOverlaps + res.DoubleRuns.ReplicaIDsTwice + res.DoubleRuns.RecordOverlaps
	res.ServerLogWarning = countWarnings(filepath.Join(dir, "server.log"))

	stopAgents()
	agentsWG.Wait()
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		res.HarnessCPU = (time.Duration(ru.Utime.Nano()) + time.Duration(ru.Stime.Nano())).Seconds()
	}
	res.WallSeconds = time.Since(began).Seconds()
	if res.TimedOut {
		return res, fmt.Errorf("not every job ended within --timeout %s: %v", c.Timeout, counts)
	}
	return res, nil
}

// finishSubmitOnly checks that the server holds every acknowledged job,
// queued, and fills in the server's figures.
func finishSubmitOnly(ctx context.Context, res *Result, c Config, hc *http.Client, srv *server, began time.Time) error {
	counts, err := jobCounts(ctx, hc, srv.url, srv.admin)
	if err != nil {
		return fmt.Errorf("reading the job counts: %w", err)
	}
	res.FinalStates = counts
	st, _ := readProc(srv.cmd.Process.Pid)
	res.ServerPeakRSSMB = float64(st.PeakRSS) / (1 << 20)
	res.ServerCPUSeconds, res.ServerSysCPUSeconds = st.CPU.Seconds(), st.SysCPU.Seconds()
	res.ServerLogWarning = countWarnings(srv.logFile.Name())
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		res.HarnessCPU = (time.Duration(ru.Utime.Nano()) + time.Duration(ru.Stime.Nano())).Seconds()
	}
	res.WallSeconds = time.Since(began).Seconds()
	if counts[string(model.JobQueued)] != c.Jobs {
		return fmt.Errorf("the server counts %v after %d acknowledged submissions, want them all queued", counts, c.Jobs)
	}
	return nil
}

// startVirtualNodes creates an agent token per node as the admin, then
// starts and registers every node, returning once all are registered.
func startVirtualNodes(ctx context.Context, c *Config, base string, admin *client.Client, hc *http.Client, tr *tracker, wg *sync.WaitGroup) (int, error) {
	tokens := make([]string, c.Nodes)
	if err := parallel(ctx, c.Nodes, 16, func(i int) error {
		created, err := admin.CreateToken(ctx, api.TokenCreate{Kind: model.TokenAgent, Subject: nodeName(i), Name: "loadtest", TTL: model.Duration(24 * time.Hour)})
		if err != nil {
			return fmt.Errorf("creating the agent token of %s: %w", nodeName(i), err)
		}
		tokens[i] = created.Secret
		return nil
	}); err != nil {
		return 0, err
	}
	nodes := make([]*vnode, c.Nodes)
	if err := parallel(ctx, c.Nodes, 16, func(i int) error {
		nodes[i] = newVNode(i, base, tokens[i], hc, c, tr)
		return nodes[i].register(ctx)
	}); err != nil {
		return 0, err
	}
	for _, n := range nodes {
		wg.Go(func() { n.run(ctx) })
	}
	return len(nodes), nil
}

// ended counts the jobs in a final state.
func ended(counts map[string]int) int {
	return counts[string(model.JobSucceeded)] + counts[string(model.JobFailed)] +
		counts[string(model.JobCancelled)] + counts[string(model.JobStoppedEarly)]
}

// waitLocalNode waits for `up`'s local agent to register.
func waitLocalNode(ctx context.Context, admin *client.Client) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		nl, err := admin.Nodes(ctx)
		if err == nil {
			for _, n := range nl.Nodes {
				if n.State == model.NodeReady {
					return nil
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting for the local agent to register: %v", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // polling the server, bounded by the deadline
		}
	}
}

// parallel runs fn(0..n-1) on at most width goroutines; the first error
// stops the rest from starting.
func parallel(ctx context.Context, n, width int, fn func(int) error) error {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range min(width, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					next.Store(int64(n))
					return
				}
			}
		})
	}
	wg.Wait()
	if len(errs) == 0 && ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.Join(errs...)
}

// submitted is the outcome of the submission phase.
type submitted struct {
	ok        int
	elapsed   time.Duration
	latencies []time.Duration // sorted
	statuses  map[int]int     // final status of each submission; 0: no answer
	answered  map[string]time.Time
	refusal   string // the first refusal's body
}

// submit posts c.Jobs manifests from c.Clients goroutines, each with its own
// Idempotency-Key; a submission that gets no answer or a 5xx is retried
// with the same key, at most three times.
func submit(ctx context.Context, c *Config, base, token string, hc *http.Client, tr *tracker) submitted {
	var (
		next   atomic.Int64
		mu     sync.Mutex
		out    = submitted{statuses: map[int]int{}, answered: make(map[string]time.Time, c.Jobs)}
		wg     sync.WaitGroup
		prefix = strconv.FormatInt(time.Now().UnixNano(), 36)
	)
	lat := make([]time.Duration, c.Jobs)
	start := time.Now()
	for range c.Clients {
		wg.Go(func() {
			buf := make([]byte, 0, 1024)
			for {
				i := int(next.Add(1) - 1)
				if i >= c.Jobs || ctx.Err() != nil {
					return
				}
				buf = manifest(buf[:0], c, i)
				t0 := time.Now()
				var (
					status int
					id     string
				)
				for try := 0; try < 3 && ctx.Err() == nil; try++ {
					var refusal string
					status, id, refusal = post(ctx, hc, base, token, prefix+"-"+strconv.Itoa(i), buf)
					if refusal != "" {
						mu.Lock()
						if out.refusal == "" {
							out.refusal = refusal
						}
						mu.Unlock()
					}
					if status != 0 && status < 500 {
						break
					}
				}
				now := time.Now()
				lat[i] = now.Sub(t0)
				mu.Lock()
				out.statuses[status]++
				if status == http.StatusCreated {
					out.ok++
					out.answered[id] = now
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	slices.Sort(lat)
	out.latencies = lat
	return out
}

// post sends one submission and returns the status and the job id, or the
// start of a refusal's body.
func post(ctx context.Context, hc *http.Client, base, token, key string, body []byte) (int, string, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/jobs", bytes.NewReader(body))
	if err != nil {
		return 0, "", err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(api.IdempotencyHeader, key)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp.StatusCode, "", string(data)
	}
	var v struct {
		ID string `json:"id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&v)
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, v.ID, ""
}

// manifest appends job i's manifest (about 600 bytes, the shape of the
// submission benchmark): one H100 with CPU and memory asks for virtual
// nodes, a gpus: 0 shell command for the local agent.
func manifest(buf []byte, c *Config, i int) []byte {
	if c.Nodes == 0 && !c.SubmitOnly {
		buf = append(buf, `{"apiVersion":"gpufleet.dev/v1","kind":"Job","metadata":{"name":"burst-`...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		return append(buf, `","tags":{"team":"nlp","experiment":"burst"}},`+
			`"spec":{"resources":{"gpus":0},"run":{"command":["sh","-c","echo started; echo done"]}}}`...)
	}
	buf = append(buf, `{"apiVersion":"gpufleet.dev/v1","kind":"Job","metadata":{"name":"sweep-lr-`...)
	buf = strconv.AppendInt(buf, int64(i), 10)
	buf = append(buf, `","project":"nlp","tags":{"team":"nlp","experiment":"lr-sweep","owner":"alice"}},`+
		`"spec":{"priority":"normal","resources":{"gpus":`...)
	buf = strconv.AppendInt(buf, int64(c.JobGPUs), 10)
	buf = append(buf, `,"gpu":{"models":["H100"],"minMemory":"80Gi"},"cpu":`...)
	buf = strconv.AppendFloat(buf, c.JobCPU, 'g', -1, 64)
	buf = append(buf, `,"memory":"`...)
	buf = strconv.AppendInt(buf, int64(c.JobMemoryGi), 10)
	return append(buf, `Gi"},`+
		`"run":{"command":["torchrun","--nproc-per-node=1","train.py","--config","llama-7b.yaml","--lr","3e-4","--epochs","3"],`+
		`"workdir":"/workspace/llm-finetune","env":{"HF_HOME":"/cache/huggingface","WANDB_PROJECT":"lr-sweep","NCCL_DEBUG":"WARN"}},`+
		`"spot":"allowed","checkpoint":{"interval":"30m","signal":"SIGTERM","grace":"120s"},"retries":{"failures":2},"limits":{"runtime":"12h"}}}`...)
}

// recordDoubleRuns reads every job's record: how many were requeued, and
// how many have attempts that overlap in the record.
func recordDoubleRuns(ctx context.Context, admin *client.Client, jobs int) (requeued, overlaps int, err error) {
	list, err := admin.ListJobs(ctx, client.ListOptions{Limit: jobs + 100})
	if err != nil {
		return 0, 0, err
	}
	var again []string
	for _, j := range list {
		if j.Attempts > 1 {
			again = append(again, j.ID)
		}
	}
	var mu sync.Mutex
	err = parallel(ctx, len(again), 8, func(i int) error {
		v, err := admin.Job(ctx, again[i])
		if err != nil {
			return err
		}
		if attemptsOverlap(v.AttemptDetails) {
			mu.Lock()
			overlaps++
			mu.Unlock()
		}
		return nil
	})
	return len(again), overlaps, err
}

// attemptsOverlap reports whether an attempt started before an earlier
// started one's recorded end.
func attemptsOverlap(atts []*model.Attempt) bool {
	var started []*model.Attempt
	for _, a := range atts {
		if a.StartedAt != nil {
			started = append(started, a)
		}
	}
	for i, a := range started {
		for _, b := range started[i+1:] {
			if a.EndedAt == nil || a.EndedAt.After(*b.StartedAt) {
				return true
			}
		}
	}
	return false
}

// localDoubleStarts counts jobs the local agent started more than once:
// jobs with more than one replica folder the supervisor wrote to.
func localDoubleStarts(replicas string) int {
	entries, err := os.ReadDir(replicas)
	if err != nil {
		return 0
	}
	perJob := map[string]int{}
	for _, e := range entries {
		// <job>-a<N>-r<rank>
		name := e.Name()
		i := strings.LastIndex(name, "-a")
		if i < 0 {
			continue
		}
		_, errPID := os.Stat(filepath.Join(replicas, name, "pid.json"))
		_, errExit := os.Stat(filepath.Join(replicas, name, "exit.json"))
		if errPID == nil || errExit == nil {
			perJob[name[:i]]++
		}
	}
	n := 0
	for _, c := range perJob {
		if c > 1 {
			n++
		}
	}
	return n
}

// countWarnings counts WARN and ERROR lines in the server's log.
func countWarnings(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(data, []byte(`"level":"WARN"`)) + bytes.Count(data, []byte(`"level":"ERROR"`)) +
		bytes.Count(data, []byte("level=WARN")) + bytes.Count(data, []byte("level=ERROR"))
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// raiseFileLimit lifts the soft open-file limit to the hard one: a thousand
// agents hold a thousand connections, and the server inherits the limit.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// WriteTable prints the result for people.
// cpuPer1000 says the server's (and the database's) CPU per 1,000
// submissions.
func cpuPer1000(r *Result) string {
	s := fmt.Sprintf("server %.3f s", r.ServerCPUPer1000)
	if r.StoreCPUSubmit > 0 {
		s += fmt.Sprintf(", database %.3f s", r.StoreCPUPer1000)
	}
	return s
}

func (r *Result) WriteTable(w io.Writer) {
	after := func(s float64) string {
		if s < 0 {
			return "not reached"
		}
		return fmt.Sprintf("%.2f s", s)
	}
	rows := [][2]string{
		{"mode", fmt.Sprintf("%s, %d nodes, %d jobs, %d clients, job duration %.1f s", r.Mode, r.Nodes, r.Jobs, r.Clients, r.JobDuration)},
		{"submits/s", fmt.Sprintf("%.0f (%d in %.2f s; statuses %v)", r.SubmitsPerSec, r.Jobs, r.SubmitSeconds, r.SubmitStatuses)},
		{"submit p50 / p99", fmt.Sprintf("%.1f ms / %.1f ms", r.SubmitP50ms, r.SubmitP99ms)},
		{"store commits while submitting", fmt.Sprintf("%d, %.1f batches each, %.2f ms mean", r.Commits, r.BatchesPerCommit, r.CommitMs)},
	}
	if r.Mode != "submit-only" {
		rows = append(rows, [2]string{"all placed after last submit", after(r.PlacedAfterLastSubmit)},
			[2]string{"all succeeded after last submit", after(r.SucceededAfterLastSubmit)})
	}
	if r.JobsFitAtOnce > 0 {
		rows = append(rows, [2]string{"jobs that fit at once", strconv.Itoa(r.JobsFitAtOnce)})
	}
	if r.Mode == "virtual-agents" {
		rows = append(rows, [2]string{"queue wait p50 / p99", fmt.Sprintf("%.2f s / %.2f s", r.QueueWaitP50, r.QueueWaitP99)})
	}
	d := r.DoubleRuns
	rows = append(rows,
		[2]string{"final states", fmt.Sprint(r.FinalStates)},
		[2]string{"double runs", fmt.Sprintf("%d (agent overlaps %d, replica ids twice %d, record overlaps %d; requeued %d)", d.Total, d.AgentOverlaps, d.ReplicaIDsTwice, d.RecordOverlaps, d.Requeued)},
		[2]string{"server peak RSS", fmt.Sprintf("%.0f MB", r.ServerPeakRSSMB)},
		[2]string{"server CPU", fmt.Sprintf("%.1f s (submit %.1f, to placed %.1f, to succeeded %.1f; system %.1f)", r.ServerCPUSeconds, r.ServerCPUSubmit, r.ServerCPUPlace, r.ServerCPUFinish, r.ServerSysCPUSeconds)},
		[2]string{"CPU per 1,000 submissions", cpuPer1000(r)},
		[2]string{"harness CPU", fmt.Sprintf("%.1f s", r.HarnessCPU)},
		[2]string{"server log warnings", strconv.Itoa(r.ServerLogWarning)},
		[2]string{"wall", fmt.Sprintf("%.1f s", r.WallSeconds)},
	)
	for _, row := range rows {
		fmt.Fprintf(w, "%-32s %s\n", row[0], row[1])
	}
}
