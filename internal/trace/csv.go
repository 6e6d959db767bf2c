package trace

import (
	"compress/gzip"
	"embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// csvTable reads a CSV with a header row, giving cells by column name.
type csvTable struct {
	source string
	r      *csv.Reader
	col    map[string]int
	row    []string
	line   int
}

func newCSVTable(r io.Reader, source string, need ...string) (*csvTable, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, &LineError{Source: source, Line: 1, Msg: fmt.Sprintf("reading the header: %v", err)}
	}
	t := &csvTable{source: source, r: cr, col: map[string]int{}, line: 1}
	for i, h := range head {
		t.col[strings.TrimSpace(h)] = i
	}
	for _, n := range need {
		if _, ok := t.col[n]; !ok {
			return nil, &LineError{Source: source, Line: 1, Field: n, Msg: "column missing from the header"}
		}
	}
	return t, nil
}

// next reads the next row; false at the end.
func (t *csvTable) next() (bool, error) {
	row, err := t.r.Read()
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	t.line++
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			t.line = pe.Line
		}
		return false, &LineError{Source: t.source, Line: t.line, Msg: err.Error()}
	}
	t.row = row
	return true, nil
}

func (t *csvTable) cell(name string) string { return normalise(t.row[t.col[name]]) }

func (t *csvTable) fail(field, format string, a ...any) error {
	return &LineError{Source: t.source, Line: t.line, Field: field, Msg: fmt.Sprintf(format, a...)}
}

// number parses column name as a finite number ≥ 0; empty gives ok=false.
func (t *csvTable) number(name string) (v float64, ok bool, err error) {
	s := t.cell(name)
	if s == "" {
		return 0, false, nil
	}
	v, err = strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, false, t.fail(name, "must be a number ≥ 0, got %q", s)
	}
	return v, true, nil
}

// ReadPhilly reads the Philly trace as the Sia artifact derivative in
// shared data has it (columns job_id, submit_time_s, duration_s, num_gpus,
// group): each row is one job; a job of more than 8 GPUs becomes a gang of
// 8-GPU replicas (Philly's servers had 8 GPUs; 12 and 24 GPUs become 3 and
// 6 replicas of 4), its virtual cluster (group) its project. The trace has
// no GPU model, so jobs are unconstrained.
func ReadPhilly(r io.Reader, source string) (*Trace, error) {
	t, err := newCSVTable(r, source, "job_id", "submit_time_s", "duration_s", "num_gpus", "group")
	if err != nil {
		return nil, err
	}
	out := &Trace{Name: "philly", Skipped: map[string]int{}}
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		j, err := phillyJob(t)
		if err != nil {
			return nil, err
		}
		if j.Runtime <= 0 {
			out.Skipped["zero duration"]++
			continue
		}
		out.Jobs = append(out.Jobs, j)
	}
	sortJobs(out.Jobs)
	return out, nil
}

func phillyJob(t *csvTable) (Job, error) {
	id := t.cell("job_id")
	if id == "" {
		return Job{}, t.fail("job_id", "is empty")
	}
	submit, ok, err := t.number("submit_time_s")
	if err == nil && !ok {
		err = t.fail("submit_time_s", "is empty")
	}
	if err != nil {
		return Job{}, err
	}
	dur, ok, err := t.number("duration_s")
	if err == nil && !ok {
		err = t.fail("duration_s", "is empty")
	}
	if err != nil {
		return Job{}, err
	}
	n, ok, err := t.number("num_gpus")
	if err == nil && (!ok || n < 1 || n != math.Trunc(n)) {
		err = t.fail("num_gpus", "must be a whole number ≥ 1, got %q", t.cell("num_gpus"))
	}
	if err != nil {
		return Job{}, err
	}
	gpus, replicas := gang(int(n))
	return Job{ID: id, Submit: seconds(submit), Runtime: seconds(dur), GPUs: float64(gpus), Replicas: replicas,
		Project: t.cell("group")}, nil
}

// gang splits n GPUs into replicas of at most 8 GPUs that fit a node.
func gang(n int) (gpus, replicas int) {
	switch {
	case n <= 8:
		return n, 1
	case n%8 == 0:
		return 8, n / 8
	default:
		return 4, (n + 3) / 4
	}
}

// alibabaModels maps the Alibaba trace's GPU codes to the catalog's names;
// G1, G2 and G3 are undisclosed internal models and are dropped from a
// constraint (a pod allowed only those runs on any GPU).
var alibabaModels = map[string]string{
	"V100M16": "V100", "V100M32": "V100-32GB", "T4": "T4", "P100": "P100", "A10": "A10",
}

// ReadAlibaba reads the Alibaba 2023 GPU cluster trace (openb pods) as the
// shared data derivative has it: a pod is a job of num_gpus GPUs
// (gpu_milli/1000 of one GPU when it shares one), running from its
// scheduled time to its deletion (pods still running at the trace's end are
// censored there); its gpu_type constraint is mapped to catalog models.
// Pods never scheduled (Pending) and pods with no GPU are skipped, counted
// in Trace.Skipped.
func ReadAlibaba(r io.Reader, source string) (*Trace, error) {
	t, err := newCSVTable(r, source, "job_id", "submit_time_s", "duration_s", "num_gpus", "gpu_type", "gpu_milli", "qos")
	if err != nil {
		return nil, err
	}
	out := &Trace{Name: "alibaba", Skipped: map[string]int{}}
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		id := t.cell("job_id")
		if id == "" {
			return nil, t.fail("job_id", "is empty")
		}
		submit, ok, err := t.number("submit_time_s")
		if err == nil && !ok {
			err = t.fail("submit_time_s", "is empty")
		}
		if err != nil {
			return nil, err
		}
		dur, scheduled, err := t.number("duration_s")
		if err != nil {
			return nil, err
		}
		n, ok, err := t.number("num_gpus")
		if err == nil && (!ok || n != math.Trunc(n)) {
			err = t.fail("num_gpus", "must be a whole number ≥ 0, got %q", t.cell("num_gpus"))
		}
		if err != nil {
			return nil, err
		}
		milli, _, err := t.number("gpu_milli")
		if err != nil {
			return nil, err
		}
		switch {
		case !scheduled:
			out.Skipped["never scheduled"]++
			continue
		case n == 0:
			out.Skipped["no GPU"]++
			continue
		case dur <= 0:
			out.Skipped["zero duration"]++
			continue
		}
		gpus := n
		if n == 1 && milli > 0 && milli < 1000 {
			gpus = milli / 1000
		}
		var models []string
		if s := t.cell("gpu_type"); s != "" {
			for _, code := range strings.Split(s, "|") {
				if m, ok := alibabaModels[code]; ok && !contains(models, m) {
					models = append(models, m)
				}
			}
		}
		g, replicas := gang(int(gpus))
		if gpus < 1 {
			g, replicas = 0, 1
		}
		j := Job{ID: id, Submit: seconds(submit), Runtime: seconds(dur), GPUs: gpus, Replicas: replicas, GPUModels: models,
			Queue: strings.ToLower(t.cell("qos"))}
		if g > 0 {
			j.GPUs = float64(g)
		}
		out.Jobs = append(out.Jobs, j)
	}
	sortJobs(out.Jobs)
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

//go:embed data/*.csv.gz
var builtin embed.FS

// builtins are the embedded traces, whole: file and reader.
var builtins = map[string]struct {
	file string
	read func(io.Reader, string) (*Trace, error)
}{
	"philly":  {"data/philly_sia.csv.gz", ReadPhilly},
	"alibaba": {"data/alibaba_openb_2023.csv.gz", ReadAlibaba},
}

// Builtin returns an embedded trace by name ("philly", "alibaba"), whole:
// submit times are offsets from the original's first submission.
func Builtin(name string) (*Trace, error) {
	b, ok := builtins[name]
	if !ok {
		return nil, fmt.Errorf("no built-in trace %q (built in: %s)", name, strings.Join(Names(), ", "))
	}
	f, err := builtin.Open(b.file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("built-in trace %s: %w", name, err)
	}
	return b.read(zr, b.file)
}
