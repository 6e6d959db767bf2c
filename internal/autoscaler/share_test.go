package autoscaler

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// TestShareIsCopyOnWrite applies random updates to a memory with views
// taken from it (Share) at random points, beside a twin updated alike that
// is never shared: every view keeps reading the memory as it was when the
// view was taken (a deep copy taken then), and the memory ends as its twin.
func TestShareIsCopyOnWrite(t *testing.T) {
	now := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	offers := make([]model.Offer, 6)
	for i := range offers {
		offers[i] = model.Offer{Provider: "sim", Region: "r", Zone: fmt.Sprint("z", i%2), InstanceType: fmt.Sprint("t", i), CapacityType: model.OnDemand}
	}
	equal := func(a, b *Memory) bool {
		return maps.Equal(a.Until, b.Until) && maps.Equal(a.Failures, b.Failures) && maps.Equal(a.JobLast, b.JobLast) && maps.Equal(a.Unavailable, b.Unavailable)
	}
	type view struct{ view, want *Memory }
	copies := 0
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var m, twin Memory
		var views []view
		for step := range 300 {
			o := offers[rng.IntN(len(offers))]
			job := fmt.Sprint("j", rng.IntN(8))
			at := now.Add(time.Duration(step) * time.Minute)
			before := m.JobLast
			switch rng.IntN(8) {
			case 0:
				views = append(views, view{m.Share(), m.Clone()})
			case 1:
				if rng.IntN(3) == 0 {
					m.Unshare()
					views = nil // the caller promises none is read any more
				}
			case 2:
				u := Unavailable{Kind: UnavailableCapacity, Offer: o, Since: at, Until: at.Add(time.Duration(rng.IntN(10)) * time.Minute)}
				m.Mark(u)
				twin.Mark(u)
			case 3:
				if m.Expire(at) != twin.Expire(at) {
					t.Fatalf("seed %d step %d: Expire disagrees with the unshared twin", seed, step)
				}
			case 4:
				m.Fail(o, job, at)
				twin.Fail(o, job, at)
			case 5:
				m.Remember(job, o)
				twin.Remember(job, o)
			case 6:
				m.Succeed(o)
				twin.Succeed(o)
			case 7:
				keep := fmt.Sprint("j", rng.IntN(8))
				waiting := func(id string) bool { return id <= keep }
				m.ForgetJobs(waiting)
				twin.ForgetJobs(waiting)
			}
			if len(views) > 0 && before != nil && m.JobLast != nil && fmt.Sprintf("%p", before) != fmt.Sprintf("%p", m.JobLast) {
				copies++
			}
			if !equal(&m, &twin) {
				t.Fatalf("seed %d step %d: the shared memory differs from its unshared twin", seed, step)
			}
			for i, v := range views {
				if !equal(v.view, v.want) {
					t.Fatalf("seed %d step %d: view %d changed after Share", seed, step, i)
				}
			}
		}
	}
	if copies == 0 {
		t.Fatal("no write ever copied a shared map: the test does not exercise copy on write")
	}
}
