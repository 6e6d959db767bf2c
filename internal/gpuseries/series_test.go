package gpuseries

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestBucketsAverageReadings(t *testing.T) {
	s := New()
	nan := math.NaN()
	s.Add(Reading{Time: t0, SMActive: 0.2, MemUsedMiB: 1000, MemTotalMiB: 80000, PowerW: nan})
	s.Add(Reading{Time: t0.Add(5 * time.Second), SMActive: 0.4, MemUsedMiB: 3000, MemTotalMiB: 80000, PowerW: 300})
	s.Add(Reading{Time: t0.Add(12 * time.Second), SMActive: 1, MemUsedMiB: nan, MemTotalMiB: nan, PowerW: nan})
	pts := s.Points()
	if len(pts) != 2 {
		t.Fatalf("got %d points, want 2 (two 10 s buckets): %+v", len(pts), pts)
	}
	p := pts[0]
	if !p.Time.Equal(t0) || math.Abs(*p.SMActive-0.3) > 1e-6 || *p.MemUsedMiB != 2000 || *p.PowerW != 300 {
		t.Errorf("first bucket = %v sm %v mem %v power %v", p.Time, *p.SMActive, *p.MemUsedMiB, *p.PowerW)
	}
	q := pts[1]
	if !q.Time.Equal(t0.Add(12*time.Second)) || *q.SMActive != 1 || q.MemUsedMiB != nil || q.PowerW != nil {
		t.Errorf("second bucket = %+v, want SM 1 and no memory or power", q)
	}
	// An older reading is dropped.
	s.Add(Reading{Time: t0.Add(time.Second), SMActive: 0})
	if got := s.Points(); len(got) != 2 || *got[1].SMActive != 1 {
		t.Errorf("an out-of-order reading changed the series: %+v", got)
	}
}

func TestBoundedOverALongRun(t *testing.T) {
	s := New()
	// A week of one-second samples whose SM activity is the hour of the
	// day's fraction: the series stays bounded, in order, and keeps the
	// shape (means stay within the range of the readings).
	end := 7 * 24 * time.Hour
	for d := time.Duration(0); d < end; d += time.Second {
		at := t0.Add(d)
		s.Add(Reading{Time: at, SMActive: float64(at.Hour()) / 23, MemUsedMiB: 1, MemTotalMiB: 2, PowerW: 100})
	}
	pts := s.Points()
	if len(pts) > MaxPoints+1 || len(pts) < MaxPoints/2 {
		t.Fatalf("%d points after a week, want about %d", len(pts), MaxPoints)
	}
	for i, p := range pts {
		if i > 0 && !p.Time.After(pts[i-1].Time) {
			t.Fatalf("point %d at %v is not after %v", i, p.Time, pts[i-1].Time)
		}
		if *p.SMActive < 0 || *p.SMActive > 1 || *p.PowerW != 100 {
			t.Fatalf("point %d = sm %v power %v", i, *p.SMActive, *p.PowerW)
		}
	}
	if span := pts[len(pts)-1].Time.Sub(pts[0].Time); span < end-2*time.Hour {
		t.Errorf("the points span %v, want the whole week", span)
	}
}
