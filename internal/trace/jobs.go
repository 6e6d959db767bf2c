package trace

import (
	"maps"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// FromJobs turns a server's finished jobs into a trace: submission times
// as offsets from the earliest submission, the spec's GPUs, replicas, GPU
// models, queue, checkpoint interval, the job's project and tags, and as
// runtime the time from the job's first start to its end (re-runs after
// preemptions included). Jobs that never started or have not ended are
// skipped and counted.
func FromJobs(name string, jobs []*model.Job) *Trace {
	t := &Trace{Name: name, Skipped: map[string]int{}}
	var origin time.Time
	for _, j := range jobs {
		if origin.IsZero() || j.SubmittedAt.Before(origin) {
			origin = j.SubmittedAt
		}
	}
	for _, j := range jobs {
		switch {
		case !j.State.Terminal():
			t.Skipped["not ended"]++
			continue
		case j.StartedAt == nil || j.FinishedAt == nil || !j.FinishedAt.After(*j.StartedAt):
			t.Skipped["never ran"]++
			continue
		}
		s := j.Spec
		replicas := max(s.Replicas, 1)
		var deadline time.Duration
		if s.Limits.Deadline != nil {
			deadline = max(s.Limits.Deadline.Sub(j.SubmittedAt), time.Second)
		}
		t.Jobs = append(t.Jobs, Job{ID: j.ID, Submit: j.SubmittedAt.Sub(origin), GPUs: s.Resources.GPUs, Replicas: replicas,
			GPUModels: slices.Clone(s.Resources.GPU.Models), Runtime: j.FinishedAt.Sub(*j.StartedAt),
			Queue: s.Queue, Project: j.Project, Tags: maps.Clone(j.Tags), CheckpointInterval: time.Duration(s.Checkpoint.Interval), Deadline: deadline})
	}
	sortJobs(t.Jobs)
	return t
}
