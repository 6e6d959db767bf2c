package controller

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

func TestArrayJobTasks(t *testing.T) {
	st := newMemStore()
	h := newHarness(t, st, clock.NewFake(t0))
	h.register("", 2)
	spec := cmdSpec(1)
	spec.Array = 3
	first := h.submit(spec)
	id := first.ArrayID
	if id == "" || first.ID != id+"-0" {
		t.Fatalf("first task = %s of array %q", first.ID, id)
	}
	tasks, err := h.c.Array(id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range tasks {
		got = append(got, fmt.Sprintf("%s %d %s", j.ID, j.ArrayIndex, j.ArrayID))
		st.mu.Lock()
		_, stored := st.jobs[j.ID]
		st.mu.Unlock()
		if !stored {
			t.Errorf("task %s is not in the store", j.ID)
		}
	}
	want := []string{id + "-0 0 " + id, id + "-1 1 " + id, id + "-2 2 " + id}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("tasks (-want +got):\n%s", diff)
	}
	if n := len(h.c.Jobs(JobFilter{Array: id})); n != 3 {
		t.Fatalf("jobs of the array = %d, want 3", n)
	}

	// Two GPUs: tasks 0 and 1 run, each with its index.
	idx := map[string]string{}
	for _, rs := range h.waitDesired(2).Replicas {
		idx[rs.JobID] = rs.Env["GPUFLEET_ARRAY_INDEX"]
		if rs.Env["GPUFLEET_ARRAY_ID"] != id {
			t.Errorf("GPUFLEET_ARRAY_ID = %q, want %q", rs.Env["GPUFLEET_ARRAY_ID"], id)
		}
	}
	if diff := cmp.Diff(map[string]string{id + "-0": "0", id + "-1": "1"}, idx); diff != "" {
		t.Fatalf("GPUFLEET_ARRAY_INDEX by task (-want +got):\n%s", diff)
	}

	// Cancelling the array cancels the queued task and stops the others.
	if _, err := h.c.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	h.waitJob(id+"-2", model.JobCancelled)
	for _, rs := range h.sync().Replicas {
		if !rs.Stop {
			t.Errorf("replica %s not stopped by cancelling the array", rs.ID)
		}
	}
	if _, err := h.c.Cancel(context.Background(), "j-nosuch"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("cancelling an unknown id: %v, want not found", err)
	}
}

func TestCheckpointIsRecorded(t *testing.T) {
	clk := clock.NewFake(t0)
	st := newMemStore()
	h := newHarness(t, st, clk)
	j := h.submit(cmdSpec(1))
	clk.Advance(90 * time.Minute)
	got, err := h.c.Checkpoint(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.LastCheckpoint == nil || !got.LastCheckpoint.Equal(clk.Now()) || got.Version <= j.Version {
		t.Fatalf("after checkpoint: last %v version %d (was %d)", got.LastCheckpoint, got.Version, j.Version)
	}
	st.mu.Lock()
	stored := st.jobs[j.ID]
	st.mu.Unlock()
	if stored.LastCheckpoint == nil {
		t.Fatal("checkpoint is not durable")
	}
	if _, err := h.c.Checkpoint(context.Background(), "j-nosuch"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
	if _, err := h.c.Cancel(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Checkpoint(context.Background(), j.ID); !errors.Is(err, ErrConflict) {
		t.Fatalf("ended job: %v, want conflict", err)
	}
}

// TestPreemptionNominatesFreedGPUs: the victim's GPUs are held for the
// preemptor until it binds.
func TestPreemptionNominatesFreedGPUs(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	h.register("", 2)
	low := cmdSpec(2)
	low.Priority = "low"
	victim := h.submit(low)
	rs := h.waitDesired(1).Replicas[0]
	h.sync(running(rs.ID))
	h.waitJob(victim.ID, model.JobRunning)

	high := cmdSpec(2)
	high.Priority = "high"
	pre := h.submit(high)
	nominated := func() []state.Nomination {
		h.c.mu.Lock()
		defer h.c.mu.Unlock()
		return h.c.st.Snapshot().Nominations
	}
	for deadline := time.Now().Add(5 * time.Second); len(nominated()) == 0; h.await() {
		if time.Now().After(deadline) {
			t.Fatal("no nomination after the preemption")
		}
	}
	want := []state.Nomination{{JobID: pre.ID, Expires: t0.Add(time.Duration(model.DefaultGrace) + nominationSlack), GPUs: []state.NodeGPUs{{NodeID: h.node, GPUs: []int{0, 1}}}}}
	if diff := cmp.Diff(want, nominated()); diff != "" {
		t.Fatalf("nominations (-want +got):\n%s", diff)
	}
	h.sync(exited(rs.ID, 143, "stopped"))
	h.waitJob(pre.ID, model.JobAdmitted)
	if got := nominated(); len(got) != 0 {
		t.Fatalf("nominations after the preemptor bound = %+v", got)
	}
}

// TestJobsTagged: JobFilter.Tagged selects the jobs carrying a tag, of any
// value, and no other.
func TestJobsTagged(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	spec := cmdSpec(1)
	spec.Default()
	var want []string
	for i, tags := range []map[string]string{nil, {"team": "a"}, {model.TagService: "chat"}, {model.TagService: "embed", "team": "b"}} {
		j, _, err := h.c.Submit(context.Background(), Submission{Project: "default", User: "test", Spec: spec, Tags: tags, Name: fmt.Sprint("j", i)})
		if err != nil {
			t.Fatal(err)
		}
		if tags[model.TagService] != "" {
			want = append([]string{j.ID}, want...) // Jobs lists the newest first
		}
	}
	var got []string
	for _, j := range h.c.Jobs(JobFilter{Tagged: model.TagService}) {
		got = append(got, j.ID)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("jobs tagged %s (-want +got):\n%s", model.TagService, diff)
	}
}
