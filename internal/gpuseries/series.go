// Package gpuseries keeps a bounded time series of one GPU's readings
// (SM activity, memory used, power) for the dashboard's plots. A Series
// covers its GPU's whole life at a resolution that halves as it grows:
// samples are averaged into buckets, at first Width wide; when MaxPoints
// buckets are closed, neighbouring pairs merge and the width doubles. So a
// series never holds more than MaxPoints points, however long it runs or
// however often it is fed.
package gpuseries

import (
	"math"
	"time"
)

// Resolution of a new Series and its bound.
const (
	Width     = 10 * time.Second
	MaxPoints = 240
)

// Point is one bucket: the mean of the readings that fell in it. A value
// no reading carried is NaN in a Series and absent (null) in JSON.
type Point struct {
	Time        time.Time `json:"t"`
	SMActive    *float64  `json:"smActive,omitempty"`    // fraction 0–1
	MemUsedMiB  *float64  `json:"memUsedMiB,omitempty"`  // MiB
	MemTotalMiB *float64  `json:"memTotalMiB,omitempty"` // MiB
	PowerW      *float64  `json:"powerW,omitempty"`      // watts
}

// GPU is one GPU's series, as an API shows it.
type GPU struct {
	Node   string  `json:"node"`
	Index  int     `json:"index"`
	Points []Point `json:"points"`
}

// Reading is one sample of a GPU; NaN marks a value not measured.
type Reading struct {
	Time                                      time.Time
	SMActive, MemUsedMiB, MemTotalMiB, PowerW float64
}

const nVals = 4

func (r Reading) vals() [nVals]float64 {
	return [nVals]float64{r.SMActive, r.MemUsedMiB, r.MemTotalMiB, r.PowerW}
}

// pt is a closed bucket, compact: seconds from the series' start and
// float32 means (NaN: none).
type pt struct {
	off  uint32
	vals [nVals]float32
}

type acc struct {
	period int64 // bucket number from the start, -1 when empty
	firstS uint32
	n      [nVals]int
	sum    [nVals]float64
}

// Series is one GPU's bounded history. It is not safe for concurrent use.
type Series struct {
	start time.Time
	width time.Duration
	pts   []pt
	open  acc
	last  time.Time
}

// New returns an empty series.
func New() *Series { return &Series{width: Width, open: acc{period: -1}} }

// Add records a reading; one older than the newest is dropped.
func (s *Series) Add(r Reading) {
	if !s.last.IsZero() && r.Time.Before(s.last) {
		return
	}
	if s.start.IsZero() {
		s.start = r.Time.Truncate(time.Second)
	}
	s.last = r.Time
	off := r.Time.Sub(s.start)
	p := int64(off / s.width)
	if s.open.period >= 0 && p != s.open.period {
		s.close()
		p = int64(off / s.width) // close may have widened the buckets
	}
	if s.open.period < 0 {
		s.open = acc{period: p, firstS: uint32(off / time.Second)}
	}
	for i, v := range r.vals() {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			s.open.n[i]++
			s.open.sum[i] += v
		}
	}
}

// close moves the open bucket into the closed points, thinning them
// first when they are full.
func (s *Series) close() {
	if s.open.period < 0 {
		return
	}
	var q pt
	q.off = s.open.firstS
	for i := range q.vals {
		q.vals[i] = float32(math.NaN())
		if s.open.n[i] > 0 {
			q.vals[i] = float32(s.open.sum[i] / float64(s.open.n[i]))
		}
	}
	s.open = acc{period: -1}
	if len(s.pts) == MaxPoints {
		s.thin()
	}
	s.pts = append(s.pts, q)
}

// thin merges neighbouring pairs of points and doubles the width.
func (s *Series) thin() {
	out := s.pts[:0]
	for i := 0; i < len(s.pts); i += 2 {
		a := s.pts[i]
		if i+1 < len(s.pts) {
			b := s.pts[i+1]
			for k := range a.vals {
				switch {
				case isNaN32(a.vals[k]):
					a.vals[k] = b.vals[k]
				case !isNaN32(b.vals[k]):
					a.vals[k] = (a.vals[k] + b.vals[k]) / 2
				}
			}
		}
		out = append(out, a)
	}
	s.pts = out
	s.width *= 2
}

func isNaN32(f float32) bool { return f != f }

// Len is the number of points Points would return.
func (s *Series) Len() int {
	n := len(s.pts)
	if s.open.period >= 0 {
		n++
	}
	return n
}

// Points returns the series, oldest first, the open bucket last.
func (s *Series) Points() []Point {
	out := make([]Point, 0, s.Len())
	conv := func(off uint32, vals [nVals]float64) Point {
		p := Point{Time: s.start.Add(time.Duration(off) * time.Second)}
		ptrs := []**float64{&p.SMActive, &p.MemUsedMiB, &p.MemTotalMiB, &p.PowerW}
		for i, v := range vals {
			if !math.IsNaN(v) {
				x := v
				*ptrs[i] = &x
			}
		}
		return p
	}
	for _, q := range s.pts {
		var v [nVals]float64
		for i, x := range q.vals {
			v[i] = float64(x)
		}
		out = append(out, conv(q.off, v))
	}
	if s.open.period >= 0 {
		var v [nVals]float64
		for i := range v {
			v[i] = math.NaN()
			if s.open.n[i] > 0 {
				v[i] = s.open.sum[i] / float64(s.open.n[i])
			}
		}
		out = append(out, conv(s.open.firstS, v))
	}
	return out
}
