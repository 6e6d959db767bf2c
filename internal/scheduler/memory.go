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
	if !m.mem.reused {
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
	// entries kept, pruned with them.
	keys map[fitKey]*fitKey
	// classes is a copy of the priority classes the entries were derived
	// under.
	classes []model.PriorityClass
	// pass counts passes; an entry not used in a pass is dropped at the
	// next sweep.
	pass uint64
	// hits and misses count jobs found and derived anew (tests).
	hits, misses int

	// last is the last pass's jobs, in the order of its pending list
	// lastPending, taken at lastGen (Snapshot.PendingGen); reused is set
	// when the present pass took them whole (a pass over the same
	// pending records reads no job and no table entry), and lists counts
	// such passes (tests).
	last        []*pjob
	lastPending []*model.Job
	lastGen     uint64
	reused      bool
	lists       int
	// vals is the array a pass's jobs are copied into (arrays); last
	// points into it.
	vals []pjob
}

// arrays returns the memory's array of n jobs, and pointers to them,
// for a pass to fill: the last pass's, which no plan refers to, when
// large enough.
func (m *jobMemory) arrays(n int) ([]pjob, []*pjob) {
	if cap(m.vals) < n {
		m.vals = make([]pjob, n+n/4)
	}
	vals := m.vals[:n]
	ptrs := m.last[:0]
	if cap(ptrs) < n {
		ptrs = make([]*pjob, n, n+n/4)
	}
	ptrs = ptrs[:n]
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	return vals, ptrs
}

// lastList returns the last pass's jobs when snap's pending list is the
// very list that pass had, at the same PendingGen, under the same
// priority classes: then every record in it is the one the entries were
// derived from, unchanged, and the pass may take them whole. Else nil.
func (m *jobMemory) lastList(snap *state.Snapshot) []*pjob {
	m.reused = false
	p := snap.Pending
	if snap.PendingGen == 0 || snap.PendingGen != m.lastGen || len(p) == 0 || len(p) != len(m.lastPending) ||
		&p[0] != &m.lastPending[0] || !slices.Equal(m.classes, snap.PriorityClasses) {
		return nil
	}
	m.reused = true
	m.lists++
	m.hits += len(p)
	return m.last
}

// keep records the pass's jobs for the next (lastList).
func (m *jobMemory) keep(snap *state.Snapshot, all []*pjob) {
	m.last, m.lastPending, m.lastGen = all, snap.Pending, snap.PendingGen
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
		m.keys = map[fitKey]*fitKey{}
		m.classes = slices.Clone(classes)
	}
	e := m.jobs[j]
	if e == nil || e.version != j.Version {
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

// intern returns the memory's pointer for k, adding one if it has none.
func (m *jobMemory) intern(k fitKey) *fitKey {
	if p := m.keys[k]; p != nil {
		return p
	}
	p := &k
	m.keys[k] = p
	return p
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
			delete(m.jobs, j)
		}
	}
	// Keep the keys of the entries kept: each shape keeps the one pointer
	// its jobs share.
	clear(m.keys)
	for _, e := range m.jobs {
		if e.pj.key != nil {
			m.keys[*e.pj.key] = e.pj.key
		}
	}
}
