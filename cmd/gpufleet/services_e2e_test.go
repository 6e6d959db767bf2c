package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// buildReplica builds testdata/replica (an OpenAI-style stand-in server)
// where workload users can run it.
func buildReplica(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(sharedDir(t), "replica")
	build := exec.Command("go", "build", "-o", bin, "./testdata/replica")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the replica: %v\n%s", err, out)
	}
	return bin
}

// applyService applies a Service manifest (YAML) from standard input:
// `gpufleet services apply -f -`.
func (s *serverProc) applyService(manifest string) {
	s.t.Helper()
	cmd := s.gpufleetCmd("services", "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("services apply: %v\n%s\nserver log:\n%s", err, out, s.out)
	}
}

// TestServiceScalesFromZero: a service with min 0 has no replica until a
// request comes; the request is held while a replica job starts (with
// PORT set) and turns ready, then served through /services/NAME/, both as
// JSON and as an unbuffered SSE stream, and its usage is counted. The
// replica checks no key, and still another project's job on its node
// cannot call it: it meets the agent's gate.
func TestServiceScalesFromZero(t *testing.T) {
	replica := buildReplica(t)
	s := startServer(t, t.TempDir(), freePort(t))
	port := testutil.PortRun(t, 8)
	manifest := fmt.Sprintf(`apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: echo}
spec:
  template:
    run: {command: [%q], env: {REPLY: hello, IGNORE_KEY: "1"}}
    resources: {gpus: 0}
  port: %d
  readiness: {path: /health, period: 200ms}
  replicas: {min: 0, max: 2}
  autoscaling: {metric: inflight, target: 2, scaleDownWindow: 3s, scaleFromZeroTimeout: 60s}
  auth: {mode: public}
`, replica, port)
	file := filepath.Join(t.TempDir(), "svc.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := s.gpufleet("services", "apply", "-f", file); !strings.Contains(out, "service echo applied") {
		t.Fatalf("apply: %s", out)
	}
	get := func() api.ServiceView {
		var v api.ServiceView
		if err := json.Unmarshal([]byte(s.gpufleet("services", "get", "echo", "-o", "json")), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	time.Sleep(time.Second)
	if v := get(); len(v.Replicas) != 0 || v.Desired != 0 {
		t.Fatalf("idle service at min 0 has replicas: %+v", v.Replicas)
	}

	start := time.Now()
	base := "http://" + s.listen + "/services/echo"
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"model":"echo","prompt":"one two"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("first request: %d %s\nserver log:\n%s", resp.StatusCode, body, s.out)
	}
	var out struct {
		Port    string `json:"port"`
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage struct {
			Total int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Usage.Total != 5 || len(out.Choices) != 1 || out.Choices[0].Text != "hello" || out.Port != strconv.Itoa(port) {
		t.Fatalf("first request answered %s (%v)", body, err)
	}
	t.Logf("scale from zero to the first response: %s", time.Since(start).Round(time.Millisecond))

	// A streamed completion: the events arrive as the replica sends them.
	resp, err = http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	stream, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || strings.Count(string(stream), "data: ") != 5 || !strings.HasSuffix(string(stream), "data: [DONE]\n\n") {
		t.Fatalf("stream: %s %q", resp.Header.Get("Content-Type"), stream)
	}

	v := get()
	if v.Ready != 1 || len(v.Replicas) != 1 || v.Requests != 2 || v.Tokens != 5+4 || len(v.Decisions) == 0 || v.Decisions[0].Kind != "service-scale" {
		t.Fatalf("after two requests: ready %d replicas %+v requests %d tokens %d events %d", v.Ready, v.Replicas, v.Requests, v.Tokens, len(v.Decisions))
	}
	job := s.job(v.Replicas[0].Job)
	if job.Spec.Run.Env["PORT"] != strconv.Itoa(port) || job.Tags["gpufleet.dev/service"] != "echo" {
		t.Fatalf("replica job: env %v tags %v", job.Spec.Run.Env, job.Tags)
	}
	if _, inEnv := job.Spec.Run.Env["GPUFLEET_SERVICE_KEY"]; inEnv || !slices.Contains(job.Spec.Run.Secrets, "GPUFLEET_SERVICE_KEY") {
		t.Fatalf("replica job: secrets %v, env %v", job.Spec.Run.Secrets, job.Spec.Run.Env)
	}
	if list := s.gpufleet("services", "list"); !strings.Contains(list, "echo") || !strings.Contains(list, "/services/echo/") {
		t.Fatalf("list:\n%s", list)
	}
	// Under load from 6 clients (3 per replica at target 2) it scales to
	// max 2; a rolling update to a new reply meanwhile fails no request;
	// when the load stops it scales back to 0.
	ld := startServiceLoad(base+"/v1/completions", 6, nil)
	failNow := func(format string, args ...any) {
		t.Helper()
		ld.halt()
		t.Fatalf(format, args...)
	}
	waitService := func(what string, ok func(api.ServiceView) bool) api.ServiceView {
		t.Helper()
		return waitServiceView(t, s, "echo", what, ok, ld)
	}
	loaded := waitService("2 ready replicas under load", func(v api.ServiceView) bool { return v.Ready == 2 })
	// A caller on the node that does not hold the project's replica key
	// (the proxy sends it) is refused, though the replica checks none:
	// the port is the agent's gate (as root; else the node runs only
	// admins' jobs, and a replica must check the key itself as vLLM's
	// --api-key does). The key is a sealed secret named by the job,
	// never in its spec.
	for _, hdr := range []string{"", "Bearer guess"} {
		req, _ := http.NewRequest("POST", "http://"+loaded.Replicas[0].Address+"/v1/completions", strings.NewReader(`{"prompt":"direct"}`))
		if hdr != "" {
			req.Header.Set("Authorization", hdr)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			failNow("%v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			failNow("a direct call to the replica with %q: %d, want 401", hdr, resp.StatusCode)
		}
	}

	if os.Geteuid() == 0 {
		// Another project's job on the same node calls the replica's
		// port as a hostile tenant would. The replica itself checks no
		// key; it listens in a network namespace of its own, and the
		// port on the node is the agent's gate, which wants the key.
		// It tries every replica's address and the service's first port
		// on loopback; a replica may have moved by the time the job runs
		// (a refused connection reaches nothing either), but no call may
		// be answered by a replica and at least one meets the gate.
		args := []string{"--", replica, "probe", fmt.Sprintf("http://127.0.0.1:%d/v1/completions", port)}
		for _, r := range loaded.Replicas {
			args = append(args, "http://"+r.Address+"/v1/completions")
		}
		logs := tenantJob(t, s, args...)
		if strings.Contains(logs, "status 2") || !strings.Contains(logs, "status 401") {
			failNow("another project's job called the replica directly:\n%s", logs)
		}
	}

	// The replica's output reaches the server as the agent ships it, each
	// line prefixed with its replica's slot, whose PORT is the service's
	// port plus the slot. Which slots are live depends on how the
	// autoscaler moved (a scaled-down slot 0 may be draining), so any
	// live one will do.
	listening := regexp.MustCompile(`\[replica (\d+)\] .*replica listening on :(\d+)`)
	slot := ""
	for deadline := time.Now().Add(30 * time.Second); slot == ""; {
		logs := s.gpufleet("services", "logs", "echo")
		for _, m := range listening.FindAllStringSubmatch(logs, -1) {
			n, _ := strconv.Atoi(m[1])
			if m[2] == strconv.Itoa(port+n) {
				slot = m[1]
			}
		}
		if slot == "" && time.Now().After(deadline) {
			failNow("services logs: no line of a replica listening on the service's port plus its slot:\n%s", logs)
		}
		time.Sleep(200 * time.Millisecond) // polling the server; bounded by the deadline
	}
	if logs := s.gpufleet("services", "logs", "echo", "--replica", slot); strings.Contains(logs, "[replica") || !strings.Contains(logs, "replica listening") {
		failNow("services logs --replica %s:\n%s", slot, logs)
	}
	if ex := s.gpufleet("explain", "service", "echo"); !strings.Contains(ex, "inflight at 2 per ready replica; 0 to 2 replicas") || !strings.Contains(ex, "replicas 0 → 1: scale from zero") {
		failNow("explain service:\n%s", ex)
	}

	updated := strings.Replace(manifest, "REPLY: hello", "REPLY: world", 1)
	if err := os.WriteFile(file, []byte(updated), 0o600); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("services", "apply", "-f", file)
	waitService("every replica at generation 2", func(v api.ServiceView) bool {
		if v.Ready < 1 {
			return false
		}
		for _, r := range v.Replicas {
			if r.Generation != 2 {
				return false
			}
		}
		return true
	})
	// A replica's process crashes under load: its requests go to the
	// other replica and a new job replaces it.
	v = waitService("2 ready replicas", func(v api.ServiceView) bool { return v.Ready == 2 })
	crashed := v.Replicas[0]
	crash, _ := http.NewRequest("GET", "http://"+crashed.Address+"/crash", nil)
	crash.Header.Set("Authorization", "Bearer "+replicaEnv(t, s.dataDir, crashed.Job)["GPUFLEET_SERVICE_KEY"])
	if resp, err := http.DefaultClient.Do(crash); err == nil {
		// The gate sent the GET on a kept-alive connection; its transport
		// tries a GET once more on a new one, finds the replica gone and
		// says so (502). Any answer but that is the replica's.
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("the replica answered /crash: %d", resp.StatusCode)
		}
	}
	waitService("the crashed replica replaced", func(v api.ServiceView) bool {
		if v.Ready != 2 {
			return false
		}
		for _, r := range v.Replicas {
			if r.Job == crashed.Job {
				return false
			}
		}
		return true
	})
	ld.halt()
	if ld.failed.Load() != 0 || ld.ok.Load() == 0 {
		t.Fatalf("load through scale-up, a rolling update and a crash: %d ok, %d failed (last: %v)", ld.ok.Load(), ld.failed.Load(), ld.lastErr.Load())
	}
	t.Logf("load: %d requests, 0 failed, through a scale-up, a rolling update and a crashed replica", ld.ok.Load())
	resp, err = http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"after"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"text":"world"`) {
		t.Fatalf("after the update: %s", body)
	}
	waitService("scaled back to 0", func(v api.ServiceView) bool { return v.Desired == 0 && len(v.Replicas) == 0 })

	// The service is in the store: a server killed with SIGKILL and
	// started again on its data dir has it, at its generation.
	s.kill()
	s = startServer(t, s.dataDir, freePort(t))
	base = "http://" + s.listen + "/services/echo"
	if v := get(); v.Name != "echo" || v.Generation != 2 || v.Spec.Port != port {
		t.Fatalf("after a restart: %+v", v.Service)
	}
	// The autoscaler's decisions are stored with the service: explain
	// shows those made before the restart.
	if ex := s.gpufleet("explain", "service", "echo"); !strings.Contains(ex, "replicas 0 → 1: scale from zero") || !strings.Contains(ex, "→ 0: inflight below target") {
		t.Fatalf("explain service after a restart:\n%s", ex)
	}

	s.gpufleet("services", "delete", "echo")
	s.waitJob(job.ID, func(v api.JobView) bool { return v.State.Terminal() }, "cancelled with its service")
	resp, err = http.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("deleted service answered %d", resp.StatusCode)
	}
}

// serviceLoad is a bounded load loop on loopback: workers clients send
// completions (with an Idempotency-Key: a completion is safe to send
// again) until halt, counting the answers.
type serviceLoad struct {
	ok, failed atomic.Int64
	lastErr    atomic.Value
	stop       chan struct{}
	wg         sync.WaitGroup
}

// startServiceLoad starts the loop against url with hdr on every request.
func startServiceLoad(url string, workers int, hdr http.Header) *serviceLoad {
	l := &serviceLoad{stop: make(chan struct{})}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				req, _ := http.NewRequest("POST", url, strings.NewReader(`{"prompt":"load"}`))
				for k, v := range hdr {
					req.Header[k] = v
				}
				req.Header.Set("Idempotency-Key", "k")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					l.failed.Add(1)
					l.lastErr.Store(err.Error())
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					l.failed.Add(1)
					l.lastErr.Store(fmt.Sprintf("%d %s", resp.StatusCode, b))
				} else {
					l.ok.Add(1)
				}
			}
		}()
	}
	return l
}

// halt stops the loop and waits for its requests in flight. Idempotent.
func (l *serviceLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// waitServiceView polls `services get NAME` until ok, for up to 90 s; a
// timeout halts ld (when set) and fails with the server's log.
func waitServiceView(t *testing.T, s *serverProc, name, what string, ok func(api.ServiceView) bool, ld *serviceLoad) api.ServiceView {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var v api.ServiceView
		if err := json.Unmarshal([]byte(s.gpufleet("services", "get", name, "-o", "json")), &v); err != nil {
			t.Fatal(err)
		}
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			if ld != nil {
				ld.halt()
			}
			t.Fatalf("timed out waiting for %s: %+v\nserver log:\n%s", what, v, s.out)
		}
		time.Sleep(200 * time.Millisecond) // polling the server's view; bounded by the deadline
	}
}

// tenantJob runs args (gpufleet run's, after its flags) as a member of
// project nlp, and returns the job's log once it has ended.
func tenantJob(t *testing.T, s *serverProc, args ...string) string {
	t.Helper()
	name := "mallory-" + strconv.FormatInt(time.Now().UnixNano(), 36) // a token of its own per job
	var tok api.TokenCreated
	if err := json.Unmarshal([]byte(s.gpufleet("tokens", "create", name, "--ttl", "1h", "-o", "json")), &tok); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("roles", "grant", name, "nlp", "member")
	cmd := s.gpufleetCmd(append([]string{"run", "--upload-workdir", "--project", "nlp"}, args...)...)
	cmd.Env = append(cmd.Env, "GPUFLEET_TOKEN="+tok.Secret)
	cmd.Dir = t.TempDir()
	out, err := outputOf(cmd)
	if err != nil {
		t.Fatalf("mallory's job: %v\n%s", err, out)
	}
	id := strings.TrimSpace(out)
	s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	return s.gpufleet("jobs", "logs", id)
}

// TestServiceContainerReplicaBehindGate: a replica in a container (busybox
// httpd, which checks no key) is served through the proxy, while on its
// node a caller without the key, another project's process job and
// another project's container job (through slirp4netns's way to the
// host's loopback) all meet the agent's gate.
func TestServiceContainerReplicaBehindGate(t *testing.T) {
	if os.Geteuid() != 0 || !podmanWorks(t) {
		t.Skip("container replicas behind a gate need root and podman")
	}
	image := buildExampleImages(t)
	replica := buildReplica(t)
	s := startServer(t, t.TempDir(), freePort(t))
	port := testutil.PortRun(t, 4)
	manifest := fmt.Sprintf(`apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: web}
spec:
  template:
    run:
      image: %s
      command: [sh, -c, 'mkdir -p /tmp/www && echo ok > /tmp/www/health && exec httpd -f -p "$PORT" -h /tmp/www']
    resources: {gpus: 0}
  port: %d
  readiness: {path: /health, period: 200ms}
  replicas: {min: 1, max: 1}
  auth: {mode: public}
`, image, port)
	s.applyService(manifest)
	var v api.ServiceView
	for deadline := time.Now().Add(3 * time.Minute); ; {
		if err := json.Unmarshal([]byte(s.gpufleet("services", "get", "web", "-o", "json")), &v); err != nil {
			t.Fatal(err)
		}
		if v.Ready == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready replica: %+v\nserver log:\n%s", v.Replicas, s.out)
		}
		time.Sleep(250 * time.Millisecond) // polling the server; bounded by the deadline
	}
	resp, err := http.Get("http://" + s.listen + "/services/web/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "ok" {
		t.Fatalf("through the proxy: %d %q", resp.StatusCode, body)
	}
	resp, err = http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a caller on the node without the key: %d, want 401", resp.StatusCode)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/health", port)
	if logs := tenantJob(t, s, "--", replica, "probe", url); !strings.Contains(logs, "status 401") {
		t.Fatalf("another project's process job reached the container replica:\n%s", logs)
	}
	slirp := fmt.Sprintf("http://10.0.2.2:%d/health", port)
	logs := tenantJob(t, s, "--image", image, "--", "sh", "-c", "wget -q -O- "+slirp+" 2>&1; echo exit $?")
	if !strings.Contains(logs, "401") || strings.Contains(logs, "\nok\n") {
		t.Fatalf("another project's container job reached the container replica:\n%s", logs)
	}
}

// TestServiceReplicaMovesOnSpotNotice: a service's replica runs on a
// simulated spot node; a stream is in flight when the node gets its
// notice. The replica takes no new request, its stream runs to its end
// within the grace period, a replacement starts on another node and serves
// a request sent meanwhile.
func TestServiceReplicaMovesOnSpotNotice(t *testing.T) {
	replica := buildReplica(t)
	scenario := filepath.Join(t.TempDir(), "scenario.yaml")
	// 2 h of simulated notice lead at 600× is 12 s: longer than the stream.
	if err := os.WriteFile(scenario, []byte("clouds:\n  aws: {noticeLead: 2h}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startControlPlane(t, t.TempDir(), freePort(t), "--sim", "--sim-clouds", "aws", "--time-scale", "600", "--sim-scenario", scenario)
	pool := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(pool, []byte(`apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: spot-h100}
spec:
  provider: sim
  sim: {clouds: [aws]}
  requirements: {gpuModels: [H100], gpusPerNode: 8}
  capacityTypes: [spot]
  min: 0
  max: 3
`), 0o600); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("apply", "-f", pool)
	port := testutil.PortRun(t, 4)
	manifest := fmt.Sprintf(`apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: spotty}
spec:
  template:
    run: {command: [%q], env: {REPLY: moved}}
    resources: {gpus: 8, gpu: {models: [H100]}}
    spot: allowed
    checkpoint: {grace: 60s}
  port: %d
  readiness: {path: /health, period: 200ms}
  replicas: {min: 1, max: 1}
  auth: {mode: public}
`, replica, port)
	s.applyService(manifest)
	get := func() api.ServiceView {
		var v api.ServiceView
		if err := json.Unmarshal([]byte(s.gpufleet("services", "get", "spotty", "-o", "json")), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	wait := func(what string, ok func(api.ServiceView) bool) api.ServiceView {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			v := get()
			if ok(v) {
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %+v\nserver log:\n%s", what, v, s.out)
			}
			time.Sleep(200 * time.Millisecond) // polling the server's view; bounded by the deadline
		}
	}
	first := wait("a ready replica", func(v api.ServiceView) bool { return v.Ready == 1 }).Replicas[0]
	node := s.attemptNode(first.Job)

	// A stream of 12 events 500 ms apart is in flight when the notice comes.
	base := "http://" + s.listen + "/services/spotty"
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","stream":true,"tokens":12,"interval_ms":500}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("the stream's first event: %q %v", line, err)
	}
	s.gpufleet("nodes", "interrupt", node)

	// A request sent now goes to the replacement, never to the moving
	// replica; it is held until the replacement is ready.
	type answer struct {
		body string
		err  error
	}
	later := make(chan answer, 1)
	go func() {
		wait("the replica moving", func(v api.ServiceView) bool {
			for _, r := range v.Replicas {
				if r.Job == first.Job && r.State == model.ReplicaDraining {
					return true
				}
			}
			return v.Ready == 0
		})
		r, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"after the notice"}`))
		if err != nil {
			later <- answer{err: err}
			return
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 {
			err = fmt.Errorf("status %d", r.StatusCode)
		}
		later <- answer{string(b), err}
	}()

	rest, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("the stream broke after the notice: %v (got %q)", err, rest)
	}
	if n := strings.Count(string(rest), "data: "); n != 11+2 || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the stream after the notice: %d events, %q", n, rest)
	}
	a := <-later
	if a.err != nil || !strings.Contains(a.body, `"text":"moved"`) {
		t.Fatalf("a request sent during the move: %v %s\nserver log:\n%s", a.err, a.body, s.out)
	}
	v := wait("a ready replica on another node", func(v api.ServiceView) bool { return v.Ready == 1 })
	for _, r := range v.Replicas {
		if r.State == model.ReplicaReady && r.Job == first.Job && s.attemptNode(r.Job) == node {
			t.Fatalf("the ready replica is still on the interrupted node %s", node)
		}
	}
}
