package scheduler

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func nvlink(j *model.Job) { j.Spec.Resources.GPU.Interconnect = "nvlink" }

// TestReservationsAreFeasibleAndAhead: a blocked job reserves GPUs only
// from a time when it could really start on them — its NVLink domain
// whole, its CPU and memory free — and only from running work whose
// estimated end is ahead; otherwise it reserves nothing and smaller jobs
// use the free GPUs (issue #14 item 3). The node has two NVLink domains of
// four GPUs (0–3, 4–7).
func TestReservationsAreFeasibleAndAhead(t *testing.T) {
	type want struct {
		Bound          []string
		Reservations   []Reservation
		EstimatedStart *time.Time
	}
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	type running struct {
		id      string
		est     time.Duration // 0: none
		started time.Duration // before now
		gpus    []int
	}
	tests := map[string]struct {
		running []running
		jobs    []*model.Job
		want    want
	}{
		"an NVLink domain no estimated end frees reserves nothing": {
			running: []running{{id: "r0", gpus: []int{0}}, {id: "r4", gpus: []int{4}}},
			jobs:    []*model.Job{job("nv", 1, 4, nvlink), job("three", 2, 3)},
			want:    want{Bound: []string{"three"}},
		},
		"the reservation waits for a whole domain": {
			running: []running{{id: "r01", est: time.Hour, gpus: []int{0, 1}}, {id: "r45", est: 2 * time.Hour, gpus: []int{4, 5}}},
			jobs:    []*model.Job{job("nv", 1, 4, nvlink)},
			want: want{
				Reservations:   []Reservation{{JobID: "nv", NodeID: "a", GPUs: []int{0, 1, 2, 3}, Start: now.Add(time.Hour)}},
				EstimatedStart: at(time.Hour),
			},
		},
		"work past its estimate holds no reservation from now": {
			running: []running{{id: "late", est: time.Hour, started: 2 * time.Hour, gpus: []int{0, 1, 2, 3}}},
			jobs:    []*model.Job{job("big", 1, 8), job("small", 2, 2, estimate(30*time.Minute))},
			want:    want{Bound: []string{"small"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld([]*model.Node{node("a", "H100", 8, 80*model.GiB)})
			for _, r := range tc.running {
				var opts []jobOpt
				if r.est > 0 {
					opts = append(opts, estimate(r.est))
				}
				w.run(job(r.id, 100, float64(len(r.gpus)), opts...), now.Add(-r.started), "a", r.gpus...)
			}
			w.submit(tc.jobs...)
			plan := Schedule(w.st.Snapshot(), nil, now, 1)
			got := want{Bound: boundIDs(plan), Reservations: plan.Reservations, EstimatedStart: verdictOf(plan, tc.jobs[0].ID).EstimatedStart}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExplainNamesReservations: a job kept off free GPUs by another job's
// reservation is told whose and until when (issue #14 item 4).
func TestExplainNamesReservations(t *testing.T) {
	w := newWorld([]*model.Node{node("a", "H100", 8, 80*model.GiB)})
	w.run(job("running", 1, 4, estimate(2*time.Hour)), now.Add(-time.Hour), "a", 0, 1, 2, 3)
	w.submit(job("big", 2, 8), job("long", 3, 2, estimate(3*time.Hour)))
	plan := Schedule(w.st.Snapshot(), nil, now, 1)
	var got []string
	for _, r := range verdictOf(plan, "long").Reasons {
		if r.Scope == "node/a" {
			got = append(got, r.Message)
		}
	}
	want := []string{
		"0 matching GPUs free, job needs 2",
		"4 GPUs reserved for big until its estimated start at 2026-11-30T13:00:00Z; a job whose runtime estimate ends it by then may use them",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("long's node reasons (-want +got):\n%s", diff)
	}
}
