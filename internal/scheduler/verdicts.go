package scheduler

import (
	"fmt"
	"iter"
	"reflect"
	"sync"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Verdicts are a plan's verdicts: for every pending job the pass did not
// bind, why not. A pass fills them by the job's place in the snapshot's
// pending list, which costs a slice write per queued job, not a map entry
// keyed by its id: a deep queue gives every job a verdict at every pass,
// and the map was most of a blocked job's turn. The index by id is built
// on the first lookup, so a plan nobody asks about never builds one.
//
// The zero Verdicts is empty. A plan's Verdicts are read-only once the
// pass returns and safe for concurrent lookups.
type Verdicts struct {
	// jobs is the pass's pending list (Snapshot.Pending, shared: never
	// written), list[i] jobs[i]'s verdict where set[i].
	jobs []*model.Job
	list []Verdict
	set  []bool
	n    int
	idx  *verdictIndex
}

type verdictIndex struct {
	once sync.Once
	byID map[string]int32
}

func newVerdicts(jobs []*model.Job) Verdicts {
	return Verdicts{jobs: jobs, list: make([]Verdict, len(jobs)), set: make([]bool, len(jobs)), idx: &verdictIndex{}}
}

// put sets the verdict of jobs[i].
func (vs *Verdicts) put(i int, v Verdict) {
	if !vs.set[i] {
		vs.set[i] = true
		vs.n++
	}
	vs.list[i] = v
}

// Len is how many jobs have a verdict.
func (vs Verdicts) Len() int { return vs.n }

// Get returns the verdict of the job with id, if it has one.
func (vs Verdicts) Get(id string) (Verdict, bool) {
	if vs.n == 0 {
		return Verdict{}, false
	}
	x := vs.idx
	x.once.Do(func() {
		x.byID = make(map[string]int32, vs.n)
		for i, j := range vs.jobs {
			if vs.set[i] {
				x.byID[j.ID] = int32(i)
			}
		}
	})
	i, ok := x.byID[id]
	if !ok {
		return Verdict{}, false
	}
	return vs.list[i], true
}

// All yields every job id with its verdict, in the snapshot's pending
// order.
func (vs Verdicts) All() iter.Seq2[string, Verdict] {
	return func(yield func(string, Verdict) bool) {
		for i, j := range vs.jobs {
			if vs.set[i] && !yield(j.ID, vs.list[i]) {
				return
			}
		}
	}
}

// Equal reports whether vs and o give the same jobs the same verdicts
// (go-cmp compares plans by it).
func (vs Verdicts) Equal(o Verdicts) bool {
	if vs.n != o.n {
		return false
	}
	for id, v := range vs.All() {
		w, ok := o.Get(id)
		if !ok || !reflect.DeepEqual(v, w) {
			return false
		}
	}
	return true
}

// Map is the verdicts as a map by job id, a copy (tests, debugging).
func (vs Verdicts) Map() map[string]Verdict {
	m := make(map[string]Verdict, vs.n)
	for id, v := range vs.All() {
		m[id] = v
	}
	return m
}

// String prints the verdicts as their map would print (by job id).
func (vs Verdicts) String() string { return fmt.Sprint(vs.Map()) }
