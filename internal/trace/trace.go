// Package trace reads job traces for `gpufleet simulate`: gpufleet's own
// JSONL format (Read, Write), the Microsoft Philly trace as the Sia
// artifact ships it (ReadPhilly) and the Alibaba 2023 GPU cluster trace
// (ReadAlibaba). Subsets of the two public traces are embedded (Builtin);
// data/PROVENANCE.md says where they come from and what was cut.
package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Job is one job of a trace: when it was submitted, what it asked for and
// how long it ran.
type Job struct {
	// ID names the job in the trace (not a gpufleet job id).
	ID string
	// Submit is the submission time as an offset from the trace's start.
	Submit time.Duration
	// GPUs per replica: a whole number, or a fraction of one GPU below 1.
	GPUs float64
	// Replicas is the gang size (at least 1).
	Replicas int
	// GPUModels constrains the GPU model; empty means any.
	GPUModels []string
	// Runtime is how long the job runs once all its replicas have started.
	Runtime time.Duration
	// Queue, Project and Tags are passed to the job as given.
	Queue, Project string
	Tags           map[string]string
	// CheckpointInterval, when set, is how often the job saves its state;
	// an interrupted job resumes from its last checkpoint.
	CheckpointInterval time.Duration
	// Deadline, when set, is how long after its submission the job must
	// have finished (its limits.deadline).
	Deadline time.Duration
}

// Trace is a list of jobs in submission order.
type Trace struct {
	// Name says where the trace came from ("philly", a file name).
	Name string
	Jobs []Job
	// Skipped counts the source rows that describe no simulable job
	// (never scheduled, or no GPU), by reason.
	Skipped map[string]int
}

// Window keeps the jobs submitted in [from, to); to ≤ 0 means no end.
// The submit times stay offsets from the trace's start.
func (t *Trace) Window(from, to time.Duration) *Trace {
	out := &Trace{Name: t.Name, Skipped: t.Skipped}
	for _, j := range t.Jobs {
		if j.Submit >= from && (to <= 0 || j.Submit < to) {
			out.Jobs = append(out.Jobs, j)
		}
	}
	return out
}

// Span is the time from the first submission to the last.
func (t *Trace) Span() time.Duration {
	if len(t.Jobs) == 0 {
		return 0
	}
	return t.Jobs[len(t.Jobs)-1].Submit - t.Jobs[0].Submit
}

// sortJobs orders jobs by submission time, ties by source order.
func sortJobs(jobs []Job) {
	slices.SortStableFunc(jobs, func(a, b Job) int {
		switch {
		case a.Submit < b.Submit:
			return -1
		case a.Submit > b.Submit:
			return 1
		}
		return 0
	})
}

// record is one line of the JSONL format (docs/simulate.md).
type record struct {
	ID                  string            `json:"id"`
	SubmitS             *float64          `json:"submitS"`
	GPUs                *float64          `json:"gpus"`
	Replicas            int               `json:"replicas,omitempty"`
	GPUModels           []string          `json:"gpuModels,omitempty"`
	RuntimeS            *float64          `json:"runtimeS"`
	Queue               string            `json:"queue,omitempty"`
	Project             string            `json:"project,omitempty"`
	Tags                map[string]string `json:"tags,omitempty"`
	CheckpointIntervalS float64           `json:"checkpointIntervalS,omitempty"`
	DeadlineS           float64           `json:"deadlineS,omitempty"`
}

// LineError is a problem with one line (or CSV row) of a trace: the
// line number counts from 1, header included; Field names the offending
// field.
type LineError struct {
	Source string
	Line   int
	Field  string
	Msg    string
}

func (e *LineError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d: %s", e.Source, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.Source, e.Line, e.Field, e.Msg)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Read parses the JSONL trace format: one job object per line, blank lines
// and lines starting with # ignored; unknown fields are errors. name is
// used in errors and as the trace's name.
func Read(r io.Reader, name string) (*Trace, error) {
	t := &Trace{Name: name}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		fail := func(field, format string, a ...any) error {
			return &LineError{Source: name, Line: line, Field: field, Msg: fmt.Sprintf(format, a...)}
		}
		var rec record
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			var te *json.UnmarshalTypeError
			if ok := asType(err, &te); ok {
				return nil, fail(te.Field, "must be a %s", te.Type)
			}
			return nil, fail("", "%v", err)
		}
		j := Job{ID: rec.ID, Replicas: rec.Replicas, GPUModels: rec.GPUModels, Queue: rec.Queue, Project: rec.Project,
			Tags: rec.Tags, CheckpointInterval: seconds(rec.CheckpointIntervalS), Deadline: seconds(rec.DeadlineS)}
		switch {
		case rec.ID == "":
			return nil, fail("id", "is required")
		case rec.SubmitS == nil:
			return nil, fail("submitS", "is required")
		case *rec.SubmitS < 0:
			return nil, fail("submitS", "must be ≥ 0, got %g", *rec.SubmitS)
		case rec.GPUs == nil:
			return nil, fail("gpus", "is required")
		case *rec.GPUs <= 0 || (*rec.GPUs > 1 && *rec.GPUs != float64(int(*rec.GPUs))):
			return nil, fail("gpus", "must be a whole number > 0 or a fraction below 1, got %g", *rec.GPUs)
		case rec.Replicas < 0:
			return nil, fail("replicas", "must be ≥ 1, got %d", rec.Replicas)
		case rec.RuntimeS == nil:
			return nil, fail("runtimeS", "is required")
		case *rec.RuntimeS <= 0:
			return nil, fail("runtimeS", "must be > 0, got %g", *rec.RuntimeS)
		case rec.CheckpointIntervalS < 0:
			return nil, fail("checkpointIntervalS", "must be ≥ 0, got %g", rec.CheckpointIntervalS)
		case rec.DeadlineS < 0:
			return nil, fail("deadlineS", "must be ≥ 0, got %g", rec.DeadlineS)
		}
		j.Submit, j.GPUs, j.Runtime = seconds(*rec.SubmitS), *rec.GPUs, seconds(*rec.RuntimeS)
		if j.Replicas == 0 {
			j.Replicas = 1
		}
		t.Jobs = append(t.Jobs, j)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: line %d: %w", name, line+1, err)
	}
	sortJobs(t.Jobs)
	return t, nil
}

// Write writes t in the JSONL format, one job a line.
func Write(w io.Writer, t *Trace) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, j := range t.Jobs {
		submit, gpus, runtime := j.Submit.Seconds(), j.GPUs, j.Runtime.Seconds()
		rec := record{ID: j.ID, SubmitS: &submit, GPUs: &gpus, Replicas: j.Replicas, GPUModels: j.GPUModels, RuntimeS: &runtime,
			Queue: j.Queue, Project: j.Project, Tags: j.Tags, CheckpointIntervalS: j.CheckpointInterval.Seconds(), DeadlineS: j.Deadline.Seconds()}
		if err := enc.Encode(rec); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func asType(err error, target **json.UnmarshalTypeError) bool {
	te, ok := err.(*json.UnmarshalTypeError)
	if ok {
		*target = te
	}
	return ok
}

// Names lists the built-in traces.
func Names() []string { return []string{"philly", "alibaba"} }

// normalise trims a CSV cell.
func normalise(s string) string { return strings.TrimSpace(s) }
