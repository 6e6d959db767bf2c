package scheduler

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

var update = flag.Bool("update", false, "rewrite testdata/*.txt with the output the scheduler gives now")

// TestGolden runs the multi-step scenarios in testdata/*.txt (in the style
// of etcd raft's data-driven tests). A scenario is blocks of commands, each
// followed by a line "----" and the output the commands must give, up to a
// blank line. Lines starting with # are comments. Commands:
//
//	node ID MODELxN [shared] [cpu=N]        a ready node
//	queue NAME [cohort=C] [nominal=N] [limit=N] [weight=N]   no nominal: unlimited
//	submit ID [queue=Q] [gpus=N] [replicas=N] [priority=P] [estimate=D] [cpu=N]
//	schedule                                 run a pass and apply its plan
//	finish ID                                end the job's attempt
//	checkpoint ID                            the job reports a checkpoint now
//	advance D                                move the clock on
//
// schedule prints the plan (bindings, preemptions, reservations, then each
// waiting job's first reason); finish prints how the job ended. The world
// applies plans as the controller does: bindings start attempts at once,
// preemptions stop attempts (which end preempted at their finish, and
// requeue the job) and nominate the victims' GPUs for the preemptor.
//
// After a deliberate change, run go test ./internal/scheduler -run Golden
// -update, and read the diff before committing it.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in testdata: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			blocks := parseScenario(t, string(data))
			sim := newSim()
			var out strings.Builder
			for _, b := range blocks {
				var got strings.Builder
				for _, c := range b.cmds {
					if err := sim.run(c.line, &got); err != nil {
						t.Fatalf("%s:%d: %s: %v", file, c.lineNo, c.line, err)
					}
				}
				if !*update {
					if diff := cmp.Diff(b.want, got.String()); diff != "" {
						t.Errorf("%s:%d: output (-want +got):\n%s", file, b.lineNo, diff)
					}
				}
				out.WriteString(b.text)
				out.WriteString("----\n")
				out.WriteString(got.String())
				out.WriteString("\n")
			}
			if *update {
				if err := os.WriteFile(file, []byte(strings.TrimSuffix(out.String(), "\n")), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

type scenarioCmd struct {
	line   string
	lineNo int
}

type block struct {
	text   string // the input lines, comments included, as written
	cmds   []scenarioCmd
	want   string
	lineNo int
}

func parseScenario(t *testing.T, data string) []block {
	t.Helper()
	var blocks []block
	var cur block
	lines := strings.Split(data, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) != "----" {
			cur.text += l + "\n"
			if s := strings.TrimSpace(l); s != "" && !strings.HasPrefix(s, "#") {
				cur.cmds = append(cur.cmds, scenarioCmd{line: s, lineNo: i + 1})
			}
			continue
		}
		cur.lineNo = i + 1
		for i++; i < len(lines) && lines[i] != ""; i++ {
			cur.want += lines[i] + "\n"
		}
		blocks = append(blocks, cur)
		cur = block{}
	}
	if strings.TrimSpace(cur.text) != "" {
		t.Fatalf("commands after the last ---- line: %q", cur.text)
	}
	return blocks
}

// sim is the world a scenario drives: a real state.State applied to as the
// controller would.
type sim struct {
	st  *state.State
	now time.Time
	seq uint64
}

func newSim() *sim { return &sim{st: state.New(), now: now} }

// args splits "k=v" words into a map, and returns the rest.
func args(words []string) (map[string]string, []string) {
	kv := map[string]string{}
	var rest []string
	for _, w := range words {
		if k, v, ok := strings.Cut(w, "="); ok {
			kv[k] = v
		} else {
			rest = append(rest, w)
		}
	}
	return kv, rest
}

func (s *sim) run(line string, out *strings.Builder) error {
	f := strings.Fields(line)
	kv, rest := args(f[1:])
	num := func(k string, def float64) (float64, error) {
		v, ok := kv[k]
		if !ok {
			return def, nil
		}
		return strconv.ParseFloat(v, 64)
	}
	switch f[0] {
	case "node":
		if len(rest) < 2 {
			return fmt.Errorf("want node ID MODELxN")
		}
		m, n, ok := strings.Cut(rest[1], "x")
		count, err := strconv.Atoi(n)
		if !ok || err != nil {
			return fmt.Errorf("bad GPUs %q: want MODELxN", rest[1])
		}
		nd := node(rest[0], m, count, 80*model.GiB)
		nd.SharedGPUs = len(rest) > 2 && rest[2] == "shared"
		if cpu, err := num("cpu", nd.CPU); err == nil {
			nd.CPU = cpu
		}
		s.st.PutNode(nd)
	case "queue":
		q := &model.Queue{Name: rest[0], Spec: model.QueueSpec{Cohort: kv["cohort"]}}
		if _, ok := kv["nominal"]; ok { // else unlimited
			nominal, err := num("nominal", 0)
			if err != nil {
				return err
			}
			quota := model.GPUQuota{Nominal: nominal}
			if _, ok := kv["limit"]; ok {
				l, err := num("limit", 0)
				if err != nil {
					return err
				}
				quota.BorrowingLimit = &l
			}
			q.Spec.Quota = map[string]model.GPUQuota{model.AnyGPU: quota}
		}
		var err error
		if q.Spec.Weight, err = num("weight", 0); err != nil {
			return err
		}
		s.st.PutQueue(q)
	case "submit":
		gpus, err := num("gpus", 1)
		if err != nil {
			return err
		}
		s.seq++
		j := job(rest[0], s.seq, gpus)
		j.SubmittedAt, j.EnqueuedAt = s.now, s.now
		if q := kv["queue"]; q != "" {
			j.Spec.Queue = q
		}
		if p := kv["priority"]; p != "" {
			j.Spec.Priority = p
		}
		r, err := num("replicas", 1)
		if err != nil {
			return err
		}
		j.Spec.Replicas = int(r)
		if j.Spec.Resources.CPU, err = num("cpu", 0); err != nil {
			return err
		}
		if e := kv["estimate"]; e != "" {
			d, err := time.ParseDuration(e)
			if err != nil {
				return err
			}
			j.Spec.Estimate.Runtime = model.Duration(d)
		}
		s.st.PutJob(j)
	case "schedule":
		s.schedule(out)
	case "finish":
		return s.finish(rest[0], out)
	case "checkpoint":
		j, ok := s.st.Job(rest[0])
		if !ok {
			return fmt.Errorf("no job %s", rest[0])
		}
		j = j.Clone()
		t := s.now
		j.LastCheckpoint = &t
		j.Version++
		s.st.PutJob(j)
	case "advance":
		d, err := time.ParseDuration(rest[0])
		if err != nil {
			return err
		}
		s.now = s.now.Add(d)
	default:
		return fmt.Errorf("unknown command %q", f[0])
	}
	return nil
}

func (s *sim) since(t time.Time) string { return "+" + t.Sub(now).String() }

func placements(ps []Placement) string {
	var parts []string
	for _, p := range ps {
		part := fmt.Sprintf("%s%v", p.NodeID, p.GPUs)
		if p.Share > 0 {
			part += fmt.Sprintf("×%g", p.Share)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, " ")
}

// schedule runs one pass at the sim's time and applies the plan.
func (s *sim) schedule(out *strings.Builder) {
	plan := Schedule(s.st.Snapshot(), nil, s.now, 1)
	fmt.Fprintf(out, "pass at %s\n", s.since(s.now))
	for _, b := range plan.Bindings {
		fmt.Fprintf(out, "bind %s %s\n", b.JobID, placements(b.Replicas))
		j, _ := s.st.Job(b.JobID)
		j = j.Clone()
		j.Attempts++
		j.State = model.JobRunning
		j.Version++
		s.st.PutJob(j)
		start := s.now
		a := &model.Attempt{ID: model.AttemptID(j.ID, j.Attempts), JobID: j.ID, Number: j.Attempts, State: model.AttemptRunning,
			CreatedAt: start, StartedAt: &start, Version: 1}
		for _, p := range b.Replicas {
			a.Replicas = append(a.Replicas, model.Replica{Rank: p.Rank, NodeID: p.NodeID, GPUs: p.GPUs, GPUShare: p.Share, State: model.AttemptRunning})
		}
		s.st.PutAttempt(a)
	}
	for _, p := range plan.Preemptions {
		fmt.Fprintf(out, "preempt %s for %s (work lost %s): %s\n", p.JobID, p.ForJobID, p.WorkLost, p.Reason)
		a, _ := s.st.Attempt(p.AttemptID)
		a = a.Clone()
		a.Stop, a.StopState, a.StopWhy = true, model.AttemptPreempted, p.Reason
		a.Version++
		s.st.PutAttempt(a)
		n := state.Nomination{JobID: p.ForJobID, Expires: s.now.Add(time.Hour)}
		for _, r := range a.Replicas {
			n.GPUs = append(n.GPUs, state.NodeGPUs{NodeID: r.NodeID, GPUs: r.GPUs})
		}
		s.st.Nominate(n)
	}
	for _, r := range plan.Reservations {
		fmt.Fprintf(out, "reserve %s %s%v from %s\n", r.JobID, r.NodeID, r.GPUs, s.since(r.Start))
	}
	ids := make([]string, 0, plan.Verdicts.Len())
	for id := range plan.Verdicts.All() {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		v := verdictOf(plan, id)
		why := ""
		if len(v.Reasons) > 0 {
			why = v.Reasons[0].Scope + ": " + v.Reasons[0].Message
		}
		fmt.Fprintf(out, "wait %s (%s #%d) %s\n", id, v.Queue, v.Position, why)
	}
}

// finish ends a job's attempt: preempted if the plan asked it to stop (the
// job requeues), else succeeded. Its GPU-hours go to its queue's usage.
func (s *sim) finish(id string, out *strings.Builder) error {
	a, ok := s.st.LiveAttempt(id)
	if !ok {
		return fmt.Errorf("job %s has no live attempt", id)
	}
	j, _ := s.st.Job(id)
	a = a.Clone()
	end := s.now
	a.EndedAt = &end
	a.State = model.AttemptSucceeded
	if a.Stop {
		a.State = a.StopState
	}
	a.Version++
	var gpus float64
	for _, r := range a.Replicas {
		if r.GPUShare > 0 {
			gpus += r.GPUShare
		} else {
			gpus += float64(len(r.GPUs))
		}
	}
	s.st.AddUsage(j.Spec.Queue, gpus*s.now.Sub(*a.StartedAt).Hours(), s.now)
	s.st.PutAttempt(a)
	j = j.Clone()
	j.Version++
	if a.State == model.AttemptPreempted {
		j.State, j.EnqueuedAt = model.JobQueued, s.now
		j.Preemptions++
		fmt.Fprintf(out, "%s preempted after %s; requeued\n", id, s.now.Sub(*a.StartedAt))
	} else {
		j.State = model.JobSucceeded
		fmt.Fprintf(out, "%s succeeded after %s\n", id, s.now.Sub(*a.StartedAt))
	}
	s.st.PutJob(j)
	return nil
}
