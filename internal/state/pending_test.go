package state

import (
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"testing"

	"github.com/gpufleet/gpufleet/internal/model"
)

// A snapshot's pending list is the queued jobs by Seq after any mix of
// submissions (in and out of Seq order), new versions, jobs leaving and
// coming back (as new records or the same record again), and a snapshot's
// list never changes after it is taken, though later snapshots may share
// it.
func TestSnapshotPendingMatchesTheQueue(t *testing.T) {
	for world := range 200 {
		rng := rand.New(rand.NewSource(int64(world)))
		s := New()
		var seq uint64
		used := map[uint64]bool{}
		var ids []string
		type taken struct {
			snap *Snapshot
			want []*model.Job
		}
		var snaps []taken
		for step := range 300 {
			switch op := rng.Intn(10); {
			case op < 4 || len(ids) == 0: // submit, sometimes out of order
				seq++
				at := seq * 1000
				if rng.Intn(5) == 0 {
					// Earlier than jobs already queued.
					for at = uint64(rng.Int63n(int64(seq * 1000))); used[at]; at = uint64(rng.Int63n(int64(seq * 1000))) {
					}
				}
				used[at] = true
				id := fmt.Sprintf("j%d", seq)
				ids = append(ids, id)
				s.PutJob(&model.Job{ID: id, Seq: at, Version: 1, State: model.JobQueued})
			case op < 6: // a new version, maybe leaving the queue
				j, ok := s.Job(ids[rng.Intn(len(ids))])
				if !ok {
					continue
				}
				j = j.Clone()
				j.Version++
				j.State = []model.JobState{model.JobQueued, model.JobAdmitted, model.JobCancelled}[rng.Intn(3)]
				s.PutJob(j)
			case op < 8: // the same record stored again, in or out of the queue
				j, ok := s.Job(ids[rng.Intn(len(ids))])
				if !ok {
					continue
				}
				if rng.Intn(2) == 0 {
					j.State = model.JobQueued
				} else {
					j.State = model.JobRunning
				}
				s.PutJob(j)
			default:
				snap := s.Snapshot()
				want := referencePending(s)
				if !slices.Equal(snap.Pending, want) {
					t.Fatalf("world %d, step %d: pending %v, want %v", world, step, ids0(snap.Pending), ids0(want))
				}
				snaps = append(snaps, taken{snap, slices.Clone(want)})
			}
		}
		for i, tk := range snaps {
			if !slices.Equal(tk.snap.Pending, tk.want) {
				t.Fatalf("world %d: snapshot %d's pending list changed after it was taken", world, i)
			}
		}
	}
}

// Jobs that share a Seq come out by ID, whether they were submitted in
// that order or not and whether the list was sorted again (a job earlier
// than those queued) or not: never in submission or the pending map's
// random order.
func TestSnapshotPendingOrdersEqualSeqByID(t *testing.T) {
	for round := range 20 {
		rng := rand.New(rand.NewSource(int64(round)))
		s := New()
		var want []string
		for i := range 40 {
			want = append(want, fmt.Sprintf("j%02d", i))
		}
		for _, i := range rng.Perm(len(want)) {
			s.PutJob(&model.Job{ID: want[i], Seq: 7, Version: 1, State: model.JobQueued})
		}
		if got := pendingIDs(s.Snapshot()); !slices.Equal(got, want) {
			t.Fatalf("round %d: pending %v, want %v", round, got, want)
		}
		s.PutJob(&model.Job{ID: "early", Seq: 1, Version: 1, State: model.JobQueued})
		if got := pendingIDs(s.Snapshot()); !slices.Equal(got, append([]string{"early"}, want...)) {
			t.Fatalf("round %d, sorted again: pending %v, want early then %v", round, got, want)
		}
	}
}

func pendingIDs(snap *Snapshot) []string {
	var out []string
	for _, j := range snap.Pending {
		out = append(out, j.ID)
	}
	return out
}

// referencePending is the queued jobs by Seq then ID, from the queue
// itself.
func referencePending(s *State) []*model.Job {
	var out []*model.Job
	for _, j := range s.pending {
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool {
		return out[a].Seq < out[b].Seq || out[a].Seq == out[b].Seq && out[a].ID < out[b].ID
	})
	return out
}

func ids0(js []*model.Job) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = fmt.Sprintf("%s@%d", j.ID, j.Seq)
	}
	return out
}

// Two snapshots with one PendingGen hold the same pending records,
// unchanged (the scheduler's Memory then takes its last pass's jobs
// whole), and two consecutive ones with one InPlaceGen hold any record
// they share unchanged (the Memory copies its job), whatever mix of submissions, new versions, records changed in
// place and stored again, jobs leaving and other changes came between:
// each snapshot's records are written down as they were when it was
// taken and compared with the last snapshot of the same generation.
func TestPendingGenChangesWithEveryQueuedRecord(t *testing.T) {
	type rec struct {
		j       *model.Job
		version uint64
		state   model.JobState
		prio    string
	}
	var same, moved, sharedRecords int
	for world := range 200 {
		rng := rand.New(rand.NewSource(int64(world)))
		s := New()
		var ids []string
		byGen := map[uint64][]rec{}
		var prev map[*model.Job]rec
		var prevInPlace uint64
		for step := range 200 {
			switch op := rng.Intn(10); {
			case op < 2 || len(ids) == 0:
				id := fmt.Sprintf("j%d", step)
				ids = append(ids, id)
				s.PutJob(&model.Job{ID: id, Seq: uint64(step), Version: 1, State: model.JobQueued})
			case op < 4: // a new record
				j, _ := s.Job(ids[rng.Intn(len(ids))])
				j = j.Clone()
				j.Version++
				j.State = []model.JobState{model.JobQueued, model.JobAdmitted, model.JobRunning}[rng.Intn(3)]
				s.PutJob(j)
			case op < 5: // the same record changed in place
				j, _ := s.Job(ids[rng.Intn(len(ids))])
				j.Version++
				j.Spec.Priority = []string{"low", "high"}[rng.Intn(2)]
				s.PutJob(j)
			case op < 6: // something else changes
				s.PutQueue(&model.Queue{Name: fmt.Sprintf("q%d", rng.Intn(3))})
			default:
				snap := s.Snapshot()
				var now []rec
				for _, j := range snap.Pending {
					now = append(now, rec{j, j.Version, j.State, j.Spec.Priority})
				}
				if snap.InPlaceGen == prevInPlace && prev != nil {
					for _, r := range now {
						if p, ok := prev[r.j]; ok && p != r {
							t.Fatalf("world %d, step %d: in-place generation %d kept, but record %s went from %+v to %+v", world, step, snap.InPlaceGen, r.j.ID, p, r)
						}
					}
					sharedRecords++
				}
				prev, prevInPlace = map[*model.Job]rec{}, snap.InPlaceGen
				for _, r := range now {
					prev[r.j] = r
				}
				if was, ok := byGen[snap.PendingGen]; ok {
					if !slices.Equal(was, now) {
						t.Fatalf("world %d, step %d: pending generation %d holds %v, earlier %v", world, step, snap.PendingGen, now, was)
					}
					same++
				} else {
					moved++
				}
				byGen[snap.PendingGen] = now
			}
		}
	}
	if same == 0 || moved == 0 || sharedRecords == 0 {
		t.Errorf("%d snapshots kept the generation, %d moved it, %d kept the in-place generation: the worlds show nothing", same, moved, sharedRecords)
	}
}
