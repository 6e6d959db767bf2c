package trace

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestReadJSONL(t *testing.T) {
	in := `# a comment
{"id":"b","submitS":60,"gpus":8,"replicas":2,"runtimeS":3600,"gpuModels":["H100"],"queue":"batch","project":"p","tags":{"team":"x"},"checkpointIntervalS":600}

{"id":"a","submitS":0,"gpus":0.5,"runtimeS":30}
`
	tr, err := Read(strings.NewReader(in), "t.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Jobs) != 2 || tr.Jobs[0].ID != "a" || tr.Jobs[1].ID != "b" {
		t.Fatalf("jobs %+v, want a then b (by submit time)", tr.Jobs)
	}
	b := tr.Jobs[1]
	if b.Submit != time.Minute || b.GPUs != 8 || b.Replicas != 2 || b.Runtime != time.Hour || b.GPUModels[0] != "H100" ||
		b.Queue != "batch" || b.Project != "p" || b.Tags["team"] != "x" || b.CheckpointInterval != 10*time.Minute {
		t.Errorf("job b read as %+v", b)
	}
	if tr.Jobs[0].Replicas != 1 {
		t.Errorf("replicas default to %d, want 1", tr.Jobs[0].Replicas)
	}
	var buf bytes.Buffer
	if err := Write(&buf, tr); err != nil {
		t.Fatal(err)
	}
	again, err := Read(&buf, "again")
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Jobs) != 2 || again.Jobs[1].Runtime != time.Hour || again.Jobs[1].Tags["team"] != "x" {
		t.Errorf("Write then Read gives %+v", again.Jobs)
	}
}

func TestReadErrors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"id":"a","submitS":0,"gpus":1,"runtimeS":1}` + "\n" + `{"id":"b","submitS":0,"gpus":1.5,"runtimeS":1}`, "t.jsonl:2: gpus: must be a whole number"},
		{`{"id":"a","submitS":0,"gpus":1}`, "t.jsonl:1: runtimeS: is required"},
		{`{"id":"a","submitS":-1,"gpus":1,"runtimeS":1}`, "t.jsonl:1: submitS: must be ≥ 0"},
		{`{"id":"a","submitS":"x","gpus":1,"runtimeS":1}`, "t.jsonl:1: submitS: must be a float64"},
		{`{"id":"a","submitS":0,"gpus":1,"runtimeS":1,"gpu":2}`, `t.jsonl:1: json: unknown field "gpu"`},
		{`{"submitS":0,"gpus":1,"runtimeS":1}`, "t.jsonl:1: id: is required"},
	} {
		_, err := Read(strings.NewReader(tt.in), "t.jsonl")
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Read(%s): error %v, want %q", tt.in, err, tt.want)
		}
	}
}

func TestReadPhilly(t *testing.T) {
	in := `job_id,submit_time_s,duration_s,num_gpus,gpu_type,status,user,group,submit_timestamp
philly-000001,10,100,1,,,,vc1,x
philly-000000,0,50,32,,,,vc2,x
philly-000002,20,70,12,,,,vc2,x
`
	tr, err := ReadPhilly(strings.NewReader(in), "p.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Jobs) != 3 {
		t.Fatalf("%d jobs", len(tr.Jobs))
	}
	if j := tr.Jobs[0]; j.ID != "philly-000000" || j.GPUs != 8 || j.Replicas != 4 || j.Runtime != 50*time.Second || j.Project != "vc2" {
		t.Errorf("32-GPU job read as %+v", j)
	}
	if j := tr.Jobs[2]; j.GPUs != 4 || j.Replicas != 3 {
		t.Errorf("12-GPU job read as %+v, want 3×4", j)
	}
	bad := strings.Replace(in, "philly-000002,20,70,12", "philly-000002,20,seventy,12", 1)
	_, err = ReadPhilly(strings.NewReader(bad), "p.csv")
	var le *LineError
	if !errors.As(err, &le) || le.Line != 4 || le.Field != "duration_s" {
		t.Errorf("a bad duration on line 4 gives %v", err)
	}
	_, err = ReadPhilly(strings.NewReader("job_id,submit_time_s\n"), "p.csv")
	if err == nil || !strings.Contains(err.Error(), "p.csv:1: duration_s: column missing") {
		t.Errorf("a header without duration_s gives %v", err)
	}
	_, err = ReadPhilly(strings.NewReader(strings.Replace(in, ",32,", ",0,", 1)), "p.csv")
	if err == nil || !strings.Contains(err.Error(), "p.csv:3: num_gpus") {
		t.Errorf("zero GPUs on line 3 gives %v", err)
	}
}

func TestReadAlibaba(t *testing.T) {
	in := `job_id,submit_time_s,duration_s,num_gpus,gpu_type,status,user,group,gpu_milli,cpu_milli,memory_mib,qos,scheduled_time_s,deletion_time_s
p0,5,100,1,V100M16|V100M32|G2,Running,,,460,6000,12288,LS,5,105
p1,0,,1,,Pending,,,1000,1,1,BE,,
p2,1,10,0,,Running,,,0,1,1,BE,1,11
p3,2,20,8,T4,Succeeded,,,1000,1,1,BE,2,22
p4,3,30,1,G2,Failed,,,1000,1,1,LS,3,33
`
	tr, err := ReadAlibaba(strings.NewReader(in), "a.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Jobs) != 3 || tr.Skipped["never scheduled"] != 1 || tr.Skipped["no GPU"] != 1 {
		t.Fatalf("jobs %+v skipped %v", tr.Jobs, tr.Skipped)
	}
	if j := tr.Jobs[2]; j.ID != "p0" || j.GPUs != 0.46 || j.Replicas != 1 || len(j.GPUModels) != 2 || j.GPUModels[1] != "V100-32GB" || j.Queue != "ls" {
		t.Errorf("shared pod read as %+v", j)
	}
	if j := tr.Jobs[1]; j.GPUs != 1 || len(j.GPUModels) != 0 {
		t.Errorf("a pod allowed only an undisclosed model reads as %+v, want unconstrained", j)
	}
	_, err = ReadAlibaba(strings.NewReader(strings.Replace(in, "p3,2,20,8", "p3,2,20,-8", 1)), "a.csv")
	if err == nil || !strings.Contains(err.Error(), "a.csv:5: num_gpus") {
		t.Errorf("negative GPUs on line 5 gives %v", err)
	}
}

// TestBuiltin: the embedded traces are whole (the counts data/PROVENANCE.md
// gives: 82,247 Philly jobs over 108.9 days; 8,152 Alibaba pods of which
// 897 never scheduled and 1,052 without a GPU).
func TestBuiltin(t *testing.T) {
	want := map[string]struct {
		rows, skipped int
		span          time.Duration
	}{
		"philly":  {82247, 0, 2613*time.Hour + 31*time.Minute + 30*time.Second},
		"alibaba": {8152, 897 + 1052, 3583*time.Hour + 49*time.Minute + 21*time.Second},
	}
	for _, name := range Names() {
		tr, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		skipped := 0
		for _, n := range tr.Skipped {
			skipped += n
		}
		w := want[name]
		if len(tr.Jobs)+skipped != w.rows || skipped != w.skipped || tr.Jobs[0].Submit != 0 || tr.Span() != w.span {
			t.Errorf("%s: %d jobs + %d skipped from %s over %s; want %d rows, %d skipped, from 0 over %s",
				name, len(tr.Jobs), skipped, tr.Jobs[0].Submit, tr.Span(), w.rows, w.skipped, w.span)
		}
		t.Logf("%s: %d jobs over %s, skipped %v", name, len(tr.Jobs), tr.Span(), tr.Skipped)
	}
	if _, err := Builtin("helios"); err == nil {
		t.Error("an unknown built-in trace gives no error")
	}
}

func TestFromJobs(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	done := &model.Job{ID: "j2", Project: "p", State: model.JobSucceeded, SubmittedAt: t0.Add(time.Minute), StartedAt: at(2 * time.Minute), FinishedAt: at(62 * time.Minute)}
	done.Spec.Replicas, done.Spec.Resources.GPUs, done.Spec.Queue = 2, 8, "batch"
	done.Spec.Checkpoint.Interval = model.Duration(10 * time.Minute)
	queued := &model.Job{ID: "j1", State: model.JobQueued, SubmittedAt: t0}
	cancelled := &model.Job{ID: "j3", State: model.JobCancelled, SubmittedAt: t0.Add(time.Hour)}
	tr := FromJobs("history", []*model.Job{cancelled, done, queued})
	if len(tr.Jobs) != 1 || tr.Skipped["not ended"] != 1 || tr.Skipped["never ran"] != 1 {
		t.Fatalf("jobs %+v, skipped %v", tr.Jobs, tr.Skipped)
	}
	j := tr.Jobs[0]
	if j.Submit != time.Minute || j.Runtime != time.Hour || j.GPUs != 8 || j.Replicas != 2 || j.Queue != "batch" || j.Project != "p" || j.CheckpointInterval != 10*time.Minute {
		t.Errorf("exported as %+v", j)
	}
}
