package scheduler

import (
	"slices"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

// Memory carries what one pass derives from each pending job alone (its
// priority class, runtime, shape and fitKey, back-off time, enqueue time,
// datasets) to the next pass, so that a deep queue that waits pass after
// pass is not read field by field from every job's spec again. What it
// keeps is a function of the job's version and the priority classes, so a
// pass with a Memory decides exactly what Schedule decides
// (TestMemoryChangesNothing compares whole plans over many passes and
// random changes). The zero Memory is ready; it is safe for concurrent
// use (passes take turns).
type Memory struct {
	mu  sync.Mutex
	mem jobMemory
}

// Schedule is the package's Schedule, with what the memory holds from
// earlier passes.
func (m *Memory) Schedule(snap *state.Snapshot, offers []model.Offer, now time.Time, seed int64) Plan {
	m.mu.Lock()
	defer m.mu.Unlock()
	plan, _ := schedule(snap, offers, now, seed, true, &m.mem)
	if m.mem.counted {
		m.mem.sweep(len(snap.Pending))
	}
	return plan
}

// jobMemory is Memory's table: one entry per pending job, by job (a
// job's record is never changed in place: a change stores a new one with
// a higher version).
type jobMemory struct {
	jobs map[*model.Job]*jobMemo
	// keys interns the entries' fitKeys: jobs of one shape share one
	// pointer, so a pass tells shapes apart by pointer (settled tries each
	// shape once) without hashing a fitKey. It holds the keys of the
	// entries kept, each counted by the entries holding it and dropped
	// with the last.
	keys map[fitKey]*interned
	// classes is a copy of the priority classes the entries were derived
	// under.
	classes []model.PriorityClass
	// pass counts passes; an entry not used in a pass is dropped at the
	// next sweep.
	pass uint64
	// hits and misses count jobs found and derived anew (tests).
	hits, misses int

	// last is the last pass's jobs, in the order of its pending list
	// lastPending, taken at lastGen and lastInPlace (Snapshot.PendingGen,
	// InPlaceGen). counted is set when the present pass looked every job
	// up (sweep then drops the rest); lists and merged count passes that
	// took the last list whole and jobs copied from it (tests).
	last                 []*pjob
	lastPending          []*model.Job
	lastGen, lastInPlace uint64
	counted              bool
	lists, merged        int
	// vals and ptrs hold a pass's jobs; spareVals and sparePtrs the last
	// pass's, which the next pass reads while it fills the others.
	vals, spareVals []pjob
	ptrs, sparePtrs []*pjob
}

// passJobs returns the pass's jobs, in the order of snap.Pending, with the
// fields a job alone decides (a pass sets its own on them; no plan
// refers to them). When the pending list is the very list of the last
// pass at the same PendingGen and priority classes, every record in it
// is the one the last pass saw, unchanged, and it gets the last pass's
// jobs whole. Else, while no record was changed in place
// (InPlaceGen) and the classes stand, a record that was in the last
// pass's list is the one the last pass saw, unchanged, and its job is
// copied from that pass (the lists are both in (Seq, ID) order, so one
// walk matches them and finds the records that left, whose entries are
// dropped); any other job is looked up by record and version (pjob).
func (m *jobMemory) passJobs(snap *state.Snapshot) []*pjob {
	p, classes := snap.Pending, snap.PriorityClasses
	same := snap.PendingGen != 0 && snap.PendingGen == m.lastGen && slices.Equal(m.classes, classes)
	if same && len(p) > 0 && len(p) == len(m.lastPending) && &p[0] == &m.lastPending[0] {
		m.counted = false
		m.lists++
		m.hits += len(p)
		return m.last
	}
	merge := snap.PendingGen != 0 && m.lastGen != 0 && snap.InPlaceGen == m.lastInPlace && slices.Equal(m.classes, classes)
	m.counted = !merge
	vals, ptrs := m.arrays(len(p))
	old, oldJobs := m.lastPending, m.last
	k := 0
	for i, j := range p {
		if merge {
			for k < len(old) && old[k] != j && pendingBefore(old[k], j) {
				m.forget(old[k]) // left the queue
				k++
			}
			if k < len(old) && old[k] == j {
				vals[i] = *oldJobs[k]
				k++
				m.merged++
				m.hits++
				continue
			}
		}
		vals[i] = *m.pjob(j, classes)
	}
	if merge {
		for ; k < len(old); k++ {
			m.forget(old[k])
		}
	}
	m.last, m.lastPending, m.lastGen, m.lastInPlace = ptrs, p, snap.PendingGen, snap.InPlaceGen
	return ptrs
}

// pendingBefore is the pending list's order: Seq, then ID.
func pendingBefore(a, b *model.Job) bool {
	if a.Seq != b.Seq {
		return a.Seq < b.Seq
	}
	return a.ID < b.ID
}

// arrays returns n jobs, and pointers to them, for a pass to fill: the
// arrays of the pass before the last, which no plan refers to, when
// large enough; the last pass's are kept for it to read.
func (m *jobMemory) arrays(n int) ([]pjob, []*pjob) {
	m.vals, m.spareVals = m.spareVals, m.vals
	m.ptrs, m.sparePtrs = m.sparePtrs, m.ptrs
	if cap(m.vals) < n {
		m.vals = make([]pjob, n+n/4)
	}
	if cap(m.ptrs) < n {
		m.ptrs = make([]*pjob, n+n/4)
	}
	vals, ptrs := m.vals[:n], m.ptrs[:n]
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	return vals, ptrs
}

type jobMemo struct {
	version uint64
	used    uint64 // the pass that last used it
	pj      pjob   // as jobPJob derives it, with the last pass's fields
}

// pjob is j's pjob, kept by the memory (a pass copies it and sets its
// per-pass fields on the copy), derived anew unless the memory holds j
// at its version under classes.
func (m *jobMemory) pjob(j *model.Job, classes []model.PriorityClass) *pjob {
	if m.jobs == nil || !slices.Equal(m.classes, classes) {
		m.jobs = map[*model.Job]*jobMemo{}
		m.keys = map[fitKey]*interned{}
		m.classes = slices.Clone(classes)
	}
	e := m.jobs[j]
	if e == nil || e.version != j.Version {
		if e != nil {
			m.release(e)
		}
		e = &jobMemo{version: j.Version, pj: jobPJob(j, classes)}
		if !e.pj.dl {
			e.pj.key = m.intern(fitKeyOf(&e.pj))
		}
		m.jobs[j] = e
		m.misses++
	} else {
		m.hits++
	}
	e.used = m.pass + 1
	return &e.pj
}

// interned is a fitKey the memory shares, with how many entries hold it.
type interned struct {
	key fitKey
	n   int
}

// intern returns the memory's pointer for k, adding one if it has none,
// for one more entry.
func (m *jobMemory) intern(k fitKey) *fitKey {
	p := m.keys[k]
	if p == nil {
		p = &interned{key: k}
		m.keys[k] = p
	}
	p.n++
	return &p.key
}

// forget drops j's entry, and its key once no entry holds it.
func (m *jobMemory) forget(j *model.Job) {
	if e := m.jobs[j]; e != nil {
		m.release(e)
		delete(m.jobs, j)
	}
}

// release lets go of e's key.
func (m *jobMemory) release(e *jobMemo) {
	if e.pj.key == nil {
		return
	}
	if p := m.keys[*e.pj.key]; p != nil {
		if p.n--; p.n <= 0 {
			delete(m.keys, *e.pj.key)
		}
	}
}

// sweep ends a pass: entries of jobs that were not pending in it are
// dropped once they outnumber the pending jobs, so the walk is paid at
// most once per pass's worth of new entries.
func (m *jobMemory) sweep(pending int) {
	m.pass++
	if len(m.jobs) <= 2*pending+64 {
		return
	}
	for j, e := range m.jobs {
		if e.used != m.pass {
			m.forget(j)
		}
	}
}
