package efficiency

import (
	"math"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// obs builds an observation of a busy, healthy 8-GPU attempt; tests change
// what they exercise.
func obs() Observation {
	return Observation{
		GPUs: 8, SMActive: 0.9, SMOccupancy: 0.4, TensorActive: 0.45, DRAMActive: 0.3, GPUUtil: 0.97,
		MemUsed: 0.85, PCIeRX: 2e9, PCIeTX: 1e8, NVLink: 2e10, HostIOWait: 0.01,
	}
}

// feed adds an observation every 5 s for d from start, f(i, obs) shaping
// the i-th.
func feed(h *History, start time.Time, d time.Duration, f func(i int, o *Observation)) time.Time {
	i := 0
	var at time.Time
	for at = start; at.Before(start.Add(d)); at = at.Add(5 * time.Second) {
		o := obs()
		o.Time = at
		if f != nil {
			f(i, &o)
		}
		h.Add(o)
		i++
	}
	return at.Add(-5 * time.Second)
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		d     time.Duration
		shape func(i int, o *Observation)
		now   time.Duration // after t0; zero means the last observation
		want  []Class
	}{
		"healthy": {d: 15 * time.Minute, want: []Class{Healthy}},
		"busy without tensor work is active": {d: 15 * time.Minute,
			shape: func(_ int, o *Observation) { o.TensorActive = 0.01 }, want: []Class{Active}},
		"idle at 3% for 10 minutes": {d: 10*time.Minute + 5*time.Second,
			shape: func(_ int, o *Observation) { o.SMActive, o.TensorActive, o.NVLink = 0.03, 0, 0 },
			want:  []Class{Idle, UnderUsed}},
		"not idle at 3% for 9m55s": {d: 10 * time.Minute,
			shape: func(_ int, o *Observation) { o.SMActive, o.TensorActive, o.NVLink = 0.03, 0, 0 },
			want:  []Class{UnderUsed}},
		"idle after busy": {d: 30 * time.Minute,
			shape: func(i int, o *Observation) {
				if i >= 120 { // 10 min busy, then 20 min idle
					o.SMActive, o.TensorActive, o.NVLink = 0.02, 0, 0
				}
			}, want: []Class{Idle, UnderUsed}},
		"a burst resets idle": {d: 30 * time.Minute,
			shape: func(i int, o *Observation) {
				o.SMActive, o.TensorActive, o.NVLink = 0.02, 0, 0
				if i == 240 { // one busy 10 s bucket at 20 min
					o.SMActive = 0.9
				}
			}, want: []Class{UnderUsed}},
		"idle from GPU utilisation when SM active is missing": {d: 11 * time.Minute,
			shape: func(_ int, o *Observation) { o.SMActive, o.GPUUtil, o.NVLink = math.NaN(), 0.01, 0 },
			want:  []Class{Idle, UnderUsed}},
		"under-used": {d: 15 * time.Minute,
			shape: func(_ int, o *Observation) { o.SMActive, o.NVLink = 0.3, 0 }, want: []Class{UnderUsed}},
		"memory-bound": {d: 15 * time.Minute,
			shape: func(_ int, o *Observation) { o.SMActive, o.DRAMActive, o.NVLink = 0.6, 0.75, 0 },
			want:  []Class{MemoryBound, Active}},
		"communication-bound": {d: 15 * time.Minute,
			shape: func(_ int, o *Observation) { o.SMActive, o.NVLink = 0.4, 120e9 },
			want:  []Class{CommunicationBound, UnderUsed}},
		"input-bound": {d: 15 * time.Minute,
			shape: func(i int, o *Observation) {
				o.SMActive, o.NVLink, o.PCIeRX, o.HostIOWait = 0.02, 0, 2e8, 0.35
				if i%4 == 0 { // a burst of work when a batch arrives
					o.SMActive = 0.7
				}
			}, want: []Class{InputBound, UnderUsed}},
		"low and bursty but the host is not waiting on I/O": {d: 15 * time.Minute,
			shape: func(i int, o *Observation) {
				o.SMActive, o.NVLink, o.PCIeRX, o.HostIOWait = 0.02, 0, 2e8, 0.01
				if i%4 == 0 {
					o.SMActive = 0.7
				}
			}, want: []Class{UnderUsed}},
		"over-sized memory": {d: 15 * time.Minute,
			shape: func(_ int, o *Observation) { o.MemUsed = 0.3 }, want: []Class{Healthy, OversizedMemory}},
		"over-sized memory needs a window of history": {d: 5 * time.Minute,
			shape: func(_ int, o *Observation) { o.MemUsed = 0.3 }, want: []Class{Healthy}},
		"warming up":        {d: time.Minute, want: []Class{Unknown}},
		"telemetry stopped": {d: 15 * time.Minute, now: 40 * time.Minute, want: []Class{Unknown}},
		"no activity fields": {d: 15 * time.Minute,
			shape: func(_ int, o *Observation) { o.SMActive, o.GPUUtil = math.NaN(), math.NaN() }, want: []Class{Unknown}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := NewHistory()
			now := feed(h, t0, tt.d, tt.shape)
			if tt.now != 0 {
				now = t0.Add(tt.now)
			}
			v := Classify(h, now, Thresholds{})
			var got []Class
			for _, f := range v.Findings {
				got = append(got, f.Class)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s\n%+v", diff, v)
			}
			if v.Class != tt.want[0] {
				t.Errorf("class %s, want %s", v.Class, tt.want[0])
			}
		})
	}
}

func TestIdleSince(t *testing.T) {
	t.Parallel()
	h := NewHistory()
	start := t0.Add(3 * time.Second) // not on a bucket boundary
	now := feed(h, start, 12*time.Minute, func(i int, o *Observation) {
		if i >= 24 { // busy for 2 min
			o.SMActive, o.TensorActive = 0.03, 0
		}
	})
	v := Classify(h, now, Thresholds{})
	want := start.Add(2 * time.Minute)
	if !v.IdleSince.Equal(want) || v.Class != UnderUsed {
		t.Errorf("idle since %s, class %s; want since +2m, under-used (10 min not yet reached)", v.IdleSince.Sub(t0), v.Class)
	}
	later := feed(h, now.Add(5*time.Second), 2*time.Minute, func(_ int, o *Observation) { o.SMActive, o.TensorActive = 0.03, 0 })
	v = Classify(h, later, Thresholds{})
	if v.Class != Idle || !v.IdleSince.Equal(want) {
		t.Errorf("class %s since %s, want idle since +2m", v.Class, v.IdleSince.Sub(t0))
	}
}

func TestIdleAcrossAShortGap(t *testing.T) {
	t.Parallel()
	h := NewHistory()
	low := func(_ int, o *Observation) { o.SMActive, o.TensorActive = 0.01, 0 }
	end := feed(h, t0, 5*time.Minute, low)
	// 40 s without telemetry (under MaxGap), then more low activity.
	now := feed(h, end.Add(45*time.Second), 6*time.Minute, low)
	if v := Classify(h, now, Thresholds{}); v.Class != Idle || !v.IdleSince.Equal(t0) {
		t.Errorf("class %s since %v, want idle since t0", v.Class, v.IdleSince)
	}
	h2 := NewHistory()
	end = feed(h2, t0, 5*time.Minute, low)
	now = feed(h2, end.Add(3*time.Minute), 6*time.Minute, low) // a 3 min gap breaks the run
	if v := Classify(h2, now, Thresholds{}); v.Class == Idle {
		t.Errorf("idle across a 3 minute gap: %+v", v)
	}
}

func TestIdleBeyondTheFineHour(t *testing.T) {
	t.Parallel()
	h := NewHistory()
	now := feed(h, t0, 3*time.Hour, func(_ int, o *Observation) { o.SMActive, o.TensorActive = 0.01, 0 })
	v := Classify(h, now, Thresholds{})
	if v.Class != Idle || v.IdleSince.After(t0.Add(5*time.Minute)) {
		t.Errorf("class %s since %s, want idle since about t0", v.Class, v.IdleSince.Sub(t0))
	}
}

func TestHistoryIsBounded(t *testing.T) {
	t.Parallel()
	size := unsafe.Sizeof(History{})
	if size > 20<<10 {
		t.Errorf("History is %d bytes, over the documented ~18 KB", size)
	}
	h := NewHistory()
	now := feed(h, t0, 48*time.Hour, nil)
	if unsafe.Sizeof(*h) != size || h.Len() != int64(48*time.Hour/(5*time.Second)) {
		t.Errorf("history grew or lost count: %d observations", h.Len())
	}
	if v := Classify(h, now, Thresholds{}); v.Class != Healthy {
		t.Errorf("after 48h: %s", v.Class)
	}
	if h.Add(Observation{Time: t0}) {
		t.Error("an observation older than the newest was accepted")
	}
}

func TestAttribute(t *testing.T) {
	t.Parallel()
	readings := []Reading{
		{UUID: "a", SMActive: 0.2, TensorActive: 0.1, DRAMActive: math.NaN(), GPUUtil: 0.5, FBUsedMiB: 10, FBTotalMiB: 100, PCIeRX: 4, PCIeTX: 2, NVLinkTX: 10, NVLinkRX: 20},
		{UUID: "b", SMActive: 0.4, TensorActive: math.NaN(), DRAMActive: math.NaN(), GPUUtil: 0.7, FBUsedMiB: 60, FBTotalMiB: 100, PCIeRX: 6, PCIeTX: 4, NVLinkTX: math.NaN(), NVLinkRX: math.NaN()},
		{UUID: "other", SMActive: 1, GPUUtil: 1, FBUsedMiB: 100, FBTotalMiB: 100},
	}
	got, ok := Attribute(t0, readings, []string{"a", "b", "gone"}, 0.1)
	if !ok {
		t.Fatal("not attributed")
	}
	want := Observation{Time: t0, GPUs: 2, SMActive: 0.3, SMOccupancy: 0, TensorActive: 0.1, DRAMActive: math.NaN(),
		GPUUtil: 0.6, MemUsed: 0.6, PCIeRX: 5, PCIeTX: 3, NVLink: 30, HostIOWait: 0.1}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool {
		return a == b || math.IsNaN(a) && math.IsNaN(b) || math.Abs(a-b) < 1e-12
	})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, ok := Attribute(t0, readings, []string{"gone"}, 0); ok {
		t.Error("attributed an attempt with no readings")
	}
}

func TestTrackerReportsChanges(t *testing.T) {
	t.Parallel()
	tr := NewTracker(Thresholds{})
	readings := func(sm float64) []Reading {
		return []Reading{{UUID: "g0", SMActive: sm, TensorActive: 0.3, GPUUtil: 0.9, FBUsedMiB: 70, FBTotalMiB: 80,
			DRAMActive: math.NaN(), SMOccupancy: math.NaN(), PCIeRX: math.NaN(), PCIeTX: math.NaN(), NVLinkTX: math.NaN(), NVLinkRX: math.NaN()}}
	}
	allocs := map[string][]string{"job-a1": {"g0"}}
	var changes []Change
	at := t0
	for ; at.Before(t0.Add(30 * time.Minute)); at = at.Add(5 * time.Second) {
		sm := 0.9
		if at.Sub(t0) >= 10*time.Minute {
			sm = 0.01
		}
		tr.Observe(at, readings(sm), allocs, math.NaN())
		changes = append(changes, tr.Evaluate(at)...)
	}
	var got []string
	for _, c := range changes {
		got = append(got, string(c.From)+"→"+string(c.To)+"@"+c.At.Sub(t0).String()+" since "+c.Since.Sub(t0).String())
	}
	want := []string{
		"unknown→healthy@2m0s since 2m0s",
		// The 10-minute window's mean falls below 80% once 1m5s of it is
		// at 1%, and below 50% once 4m25s is.
		"healthy→active@11m5s since 11m5s",
		"active→under-used@14m25s since 14m25s",
		"under-used→idle@20m0s since 10m0s",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if v, since, ok := tr.Verdict("job-a1"); !ok || v.Class != Idle || !since.Equal(t0.Add(10*time.Minute)) {
		t.Errorf("Verdict = %s since %v", v.Class, since)
	}
	tr.Forget("job-a1")
	if len(tr.Attempts()) != 0 {
		t.Error("Forget kept the attempt")
	}
}

func BenchmarkHistoryAdd(b *testing.B) {
	h := NewHistory()
	o := obs()
	at := t0
	for b.Loop() {
		at = at.Add(5 * time.Second)
		o.Time = at
		h.Add(o)
	}
}

func BenchmarkClassify(b *testing.B) {
	h := NewHistory()
	now := feed(h, t0, 2*time.Hour, nil)
	for b.Loop() {
		Classify(h, now, Thresholds{})
	}
}
