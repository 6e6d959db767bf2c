package telemetry

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/efficiency"
	"github.com/gpufleet/gpufleet/internal/model"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// sample is one sample of a node's GPUs, all at SM activity sm, with
// extra values per GPU index.
func sample(at time.Time, gpus int, sm float64, extra map[int]map[string]float64) agentapi.TelemetrySample {
	s := agentapi.TelemetrySample{Time: at}
	for i := range gpus {
		v := map[string]float64{FieldSMActive: sm, "DCGM_FI_DEV_GPU_UTIL": 100 * sm}
		for k, x := range extra[i] {
			v[k] = x
		}
		s.GPUs = append(s.GPUs, agentapi.GPUTelemetry{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Values: v})
	}
	return s
}

func TestObserveAttributesAndJudges(t *testing.T) {
	t.Parallel()
	tr := New(efficiency.Thresholds{}, []int{79})
	allocs := map[string][]string{"att-busy": {"GPU-0"}, "att-idle": {"GPU-1"}}
	var at time.Time
	for i := range 12 * 6 { // 12 minutes, one sample per 10 s
		at = t0.Add(time.Duration(i) * 10 * time.Second)
		s := sample(at, 2, 0.9, nil)
		s.GPUs[1].Values[FieldSMActive] = 0.01
		s.GPUs[1].Values["DCGM_FI_DEV_GPU_UTIL"] = 1
		if xids := tr.Observe("n1", &agentapi.Telemetry{Source: "dcgm", Samples: []agentapi.TelemetrySample{s}}, allocs); len(xids) != 0 {
			t.Fatalf("XIDs without any: %v", xids)
		}
	}
	judged := tr.Evaluate(at)
	got := map[string]efficiency.Class{}
	for _, j := range judged {
		got[j.Attempt] = j.Verdict.Class
	}
	want := map[string]efficiency.Class{"att-busy": efficiency.Active, "att-idle": efficiency.Idle}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("classes (-want +got):\n%s", diff)
	}
	if src := tr.Source("n1"); src != "dcgm" {
		t.Errorf("source %q", src)
	}
	if s, ok := tr.Latest("n1"); !ok || !s.Time.Equal(at) {
		t.Errorf("latest sample %v %v, want the one at %v", s.Time, ok, at)
	}
	if sm, ok := tr.SMActive("job-busy", "att-busy"); !ok || sm < 0.89 || sm > 0.91 {
		t.Errorf("SM active of the busy attempt %v %v", sm, ok)
	}
}

func TestXIDsOfTheDrainListReportedOnce(t *testing.T) {
	t.Parallel()
	tr := New(efficiency.Thresholds{}, []int{79})
	send := func(at time.Time, xid float64) []XID {
		s := sample(at, 2, 0.5, map[int]map[string]float64{1: {FieldXID: xid}})
		return tr.Observe("n1", &agentapi.Telemetry{Samples: []agentapi.TelemetrySample{s}}, nil)
	}
	want := []XID{{At: t0, Node: "n1", GPU: 1, UUID: "GPU-1", Code: 79, Value: 79}}
	if diff := cmp.Diff(want, send(t0, 79)); diff != "" {
		t.Errorf("first XID 79 (-want +got):\n%s", diff)
	}
	if got := send(t0.Add(10*time.Second), 79); len(got) != 0 {
		t.Errorf("the same XID again was reported: %v", got)
	}
	if got := send(t0.Add(20*time.Second), 13); len(got) != 0 {
		t.Errorf("XID 13 (not on the drain list) was reported: %v", got)
	}
	if got := send(t0.Add(30*time.Second), 79); len(got) != 1 {
		t.Errorf("XID 79 after a change was not reported again: %v", got)
	}
}

func TestEndKeepsTheFirstFinalVerdict(t *testing.T) {
	t.Parallel()
	tr := New(efficiency.Thresholds{}, nil)
	alloc := map[string][]string{"att-1": {"GPU-0"}}
	var at time.Time
	for i := range 30 {
		at = t0.Add(time.Duration(i) * 10 * time.Second)
		tr.Observe("n1", &agentapi.Telemetry{Source: "nvml", Samples: []agentapi.TelemetrySample{sample(at, 1, 0.9, nil)}}, alloc)
	}
	tr.Evaluate(at)
	tr.End([]Ended{{Attempt: "att-1", Job: "job-1", Node: "n1"}})
	if _, ok := tr.Verdict("att-1"); ok {
		t.Error("an ended attempt is still tracked")
	}
	f, ok := tr.Final("job-1")
	if !ok || f.Attempt != "att-1" || f.Source != "nvml" || f.Verdict.Class == efficiency.Unknown {
		t.Fatalf("final %+v %v, want att-1's judged verdict from nvml", f, ok)
	}
	// A sample that raced the end tracks the attempt again, with one
	// observation: ending it again must not replace the real verdict.
	tr.Observe("n1", &agentapi.Telemetry{Samples: []agentapi.TelemetrySample{sample(at.Add(10*time.Second), 1, 0.9, nil)}}, alloc)
	tr.Evaluate(at.Add(10 * time.Second))
	tr.End([]Ended{{Attempt: "att-1", Job: "job-1", Node: "n1"}})
	if g, _ := tr.Final("job-1"); g.Verdict.Class != f.Verdict.Class {
		t.Errorf("final class %s after a second end, want %s", g.Verdict.Class, f.Verdict.Class)
	}
	if sm, ok := tr.SMActive("job-1", "att-1"); !ok || sm < 0.89 {
		t.Errorf("SM active after the end %v %v", sm, ok)
	}
}

func TestAlertsAreBounded(t *testing.T) {
	t.Parallel()
	tr := New(efficiency.Thresholds{}, nil)
	for i := range maxAlerts + 5 {
		tr.Record(model.Alert{ID: fmt.Sprint(i)})
	}
	got := tr.Alerts()
	if len(got) != maxAlerts || got[0].ID != "5" || got[len(got)-1].ID != fmt.Sprint(maxAlerts+4) {
		t.Errorf("%d alerts from %s to %s", len(got), got[0].ID, got[len(got)-1].ID)
	}
}

// TestConcurrentNodes feeds many nodes at once while readers judge and
// read, for the race detector.
func TestConcurrentNodes(t *testing.T) {
	t.Parallel()
	tr := New(efficiency.Thresholds{}, []int{79})
	var wg sync.WaitGroup
	for n := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("n%d", n)
			alloc := map[string][]string{"att-" + node: {"GPU-0", "GPU-1"}}
			for i := range 100 {
				at := t0.Add(time.Duration(i) * 10 * time.Second)
				tr.Observe(node, &agentapi.Telemetry{Samples: []agentapi.TelemetrySample{sample(at, 2, 0.7, nil)}}, alloc)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 50 {
			tr.Evaluate(t0.Add(time.Duration(i) * 20 * time.Second))
			tr.Verdict("att-n0")
			tr.EachLatest(func(string, agentapi.TelemetrySample) {})
		}
	}()
	wg.Wait()
	if got := len(tr.Tracked()); got != 8 {
		t.Errorf("%d attempts tracked, want 8", got)
	}
}
