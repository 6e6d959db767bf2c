// Package deploy holds the Grafana dashboard and Prometheus alerting rules
// shipped with gpufleet; its test holds them to the series a live server
// exports.
package deploy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/services"
	"github.com/gpufleet/gpufleet/internal/store/sqlite"
)

var metricRef = regexp.MustCompile(`\bgpufleet_[a-z0-9_]+`)

// liveNames builds the registry a server builds (controller metrics, the
// telemetry and cost collectors, the API's own series) around a real
// controller and store, drives a small fleet until the labelled series
// exist — a priced node with GPU telemetry, a running job, a preemption,
// a drain XID alert, a metered hour, an API request — and returns the
// names of every family gathered along the way.
func liveNames(t *testing.T) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "gpufleet.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	prices, err := cost.ParsePrices(strings.NewReader("match,value,price_per_hour\nnode,n1,8\n"))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	var ctrl *controller.Controller
	ctrl, err = controller.New(ctx, controller.Config{
		Store: st, Logs: logs, Clock: clk, ServerURL: "http://127.0.0.1:7777", CheckpointDir: t.TempDir(),
		HeartbeatTimeout: 1000 * time.Hour, PassGap: -1,
		Cost:    controller.CostConfig{Prices: prices, MeterInterval: -1},
		Metrics: controller.NewMetrics(reg, func() map[model.JobState]int { return ctrl.JobCounts() }),
		Fatal:   func(err error) { t.Errorf("store failed: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Close()
	reg.MustRegister(ctrl.TelemetryCollector(), ctrl.CostCollector())
	srv, err := api.New(api.Config{Controller: ctrl, Identity: ctrl.Identity(), Roles: ctrl.Identity(), Auditor: ctrl.AuditLog(), Secrets: ctrl.Vault(), Catalog: cat, Logs: logs, Registry: reg, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = ctrl.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	names := map[string]bool{}
	gather := func() map[string]int {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("gathering: %v", err)
		}
		out := map[string]int{}
		for _, mf := range mfs {
			out[mf.GetName()] = len(mf.GetMetric())
			if len(mf.GetMetric()) > 0 {
				names[mf.GetName()] = true
			}
		}
		return out
	}
	// until polls the fleet, advancing the fake clock a second at a time
	// (so the controller's loop evaluates telemetry), until ok holds.
	until := func(what string, step func(), ok func(map[string]int) bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			step()
			if ok(gather()) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s after 10s: %v", what, gather())
			}
			clk.Advance(time.Second)
			time.Sleep(5 * time.Millisecond) // lets the controller's loop take the tick; bounded by the deadline
		}
	}
	sync := func(statuses []agentapi.ReplicaStatus, values map[string]float64) agentapi.SyncResponse {
		t.Helper()
		s := agentapi.TelemetrySample{Time: clk.Now()}
		for i := range 2 {
			v := map[string]float64{"DCGM_FI_PROF_SM_ACTIVE": 0.4, "DCGM_FI_DEV_GPU_UTIL": 90, "DCGM_FI_DEV_FB_USED": 1024, "DCGM_FI_DEV_POWER_USAGE": 300}
			if i == 1 {
				for k, x := range values {
					v[k] = x
				}
			}
			s.GPUs = append(s.GPUs, agentapi.GPUTelemetry{Index: i, UUID: "GPU-" + string(rune('a'+i)), Values: v})
		}
		resp, err := ctrl.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", Statuses: statuses,
			Telemetry: &agentapi.Telemetry{Source: "nvml", Samples: []agentapi.TelemetrySample{s}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	submit := func(priority string) *model.Job {
		t.Helper()
		spec := model.JobSpec{Resources: model.Resources{GPUs: 2}, Priority: priority, Run: model.RunSpec{Command: []string{"true"}}}
		spec.Default()
		j, _, err := ctrl.Submit(ctx, controller.Submission{Project: "default", User: "test", Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}

	reg1 := agentapi.Registration{NodeID: "n1", Name: "n1", Provider: "static", Region: "lab", CPU: 16, Memory: 64 * model.GiB, CapacityType: model.Owned}
	for i := range 2 {
		reg1.GPUs = append(reg1.GPUs, model.GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), Model: "H100", Memory: 80 * model.GiB})
	}
	if _, err := ctrl.Register(ctx, reg1); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.CostPass(ctx); err != nil { // starts the meter
		t.Fatal(err)
	}
	submit("low")
	var replica string
	until("replica for the low-priority job", func() {
		if resp := sync(nil, nil); len(resp.Replicas) == 1 {
			replica = resp.Replicas[0].ID
		}
	}, func(map[string]int) bool { return replica != "" })
	run := []agentapi.ReplicaStatus{{ID: replica, Phase: agentapi.PhaseRunning, StartedAt: clk.Now()}}
	sync(run, nil)
	clk.Advance(time.Hour)
	if err := ctrl.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	until("per-job series", func() { sync(run, nil) }, func(m map[string]int) bool {
		return m["gpufleet_job_sm_active"] > 0 && m["gpufleet_job_effective_cost_dollars"] > 0 && m["gpufleet_cost_dollars_total"] > 0
	})
	submit("high")
	until("preemption", func() { sync(run, nil) }, func(m map[string]int) bool { return m["gpufleet_preemptions_total"] > 0 })
	until("drain XID alert", func() { sync(run, map[string]float64{"DCGM_FI_DEV_XID_ERRORS": 79}) }, func(m map[string]int) bool {
		return m["gpufleet_alerts_total"] > 0
	})
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/version", nil))
	if m := gather(); m["gpufleet_api_request_duration_seconds"] == 0 {
		t.Fatalf("no API series after a request (status %d)", rec.Code)
	}
	// A service and one request through its proxy (no replica comes: 503).
	svcMetrics, err := services.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	svcs, err := services.New(services.Config{Controller: ctrl, Committer: ctrl.Committer(), Metrics: svcMetrics})
	if err != nil {
		t.Fatal(err)
	}
	spec := model.ServiceSpec{Template: model.JobSpec{Run: model.RunSpec{Command: []string{"serve"}}}, Port: 8000,
		Replicas:    model.ServiceReplicas{Max: 1},
		Autoscaling: model.ServiceAutoscaling{Metric: model.ScaleOnInFlight, Target: 1, ScaleFromZeroTimeout: model.Duration(time.Millisecond)},
		Auth:        model.ServiceAuth{Mode: model.AuthPublic}}
	spec.Default()
	if _, _, err := svcs.Apply(ctx, model.Service{Name: "s", Project: model.DefaultProject, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	svcs.Proxy(rec, httptest.NewRequest(http.MethodGet, "/services/s/", nil), "s", "/", nil)
	if m := gather(); m["gpufleet_service_requests_total"] == 0 || m["gpufleet_service_replicas"] == 0 || m["gpufleet_service_cost_per_hour_dollars"] == 0 {
		t.Fatalf("no service series after a request (status %d)", rec.Code)
	}
	return names
}

// exists reports whether ref names a declared metric, or one of the series
// a histogram declares.
func exists(names map[string]bool, ref string) bool {
	if names[ref] {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(ref, suf); ok && names[base] {
			return true
		}
	}
	return false
}

// exprs returns every string under a key "expr" in a decoded document.
func exprs(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "expr" {
				out = append(out, s)
			} else {
				out = append(out, exprs(e)...)
			}
		}
	case []any:
		for _, e := range x {
			out = append(out, exprs(e)...)
		}
	}
	return out
}

// TestEveryQueriedMetricExists checks every metric the dashboard and the
// alerting rules query against what a live server's registry gathers.
func TestEveryQueriedMetricExists(t *testing.T) {
	names := liveNames(t)
	for _, file := range []string{"grafana/gpufleet.json", "prometheus/alerts.yml"} {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var doc any
			if strings.HasSuffix(file, ".json") {
				err = json.Unmarshal(b, &doc)
			} else {
				err = yaml.Unmarshal(b, &doc)
			}
			if err != nil {
				t.Fatalf("parsing: %v", err)
			}
			es := exprs(doc)
			if len(es) == 0 {
				t.Fatal("no expressions found")
			}
			var missing []string
			for _, e := range es {
				for _, ref := range metricRef.FindAllString(e, -1) {
					if !exists(names, ref) && !slices.Contains(missing, ref) {
						missing = append(missing, ref)
					}
				}
			}
			if len(missing) > 0 {
				t.Errorf("queried but not exported by a live server: %v", missing)
			}
		})
	}
}
