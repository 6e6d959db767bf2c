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

// TestKeysAreTheirFormat: the appending key builders (lookups without an
// allocation) give the keys' documented format, for offers and both kinds
// of unavailability, with fields long enough to outgrow the stack buffers.
func TestKeysAreTheirFormat(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	word := func() string {
		b := make([]byte, r.IntN(70))
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		return string(b)
	}
	for range 2000 {
		o := model.Offer{Provider: word(), Region: word(), Zone: word(), InstanceType: word(), CapacityType: model.CapacityType(word())}
		if got, want := OfferKey(o), o.Provider+"/"+o.Region+"/"+o.Zone+"/"+o.InstanceType+"/"+string(o.CapacityType); got != want {
			t.Fatalf("OfferKey = %q, want %q", got, want)
		}
		pool := "p" + word()
		c := Unavailable{Kind: UnavailableCapacity, Pool: pool, Offer: o}
		if got, want := c.Key(), c.Kind+"/"+OfferKey(o); got != want {
			t.Fatalf("capacity key = %q, want %q", got, want)
		}
		q := Unavailable{Kind: UnavailableQuota, Pool: pool, Offer: o}
		if got, want := q.Key(), q.Kind+"/"+pool+"/"+o.Provider+"/"+o.Region; got != want {
			t.Fatalf("quota key = %q, want %q", got, want)
		}
		var m Memory
		at := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
		if m.out(o, at) {
			t.Fatal("an empty memory rules an offer out")
		}
		m.Mark(Unavailable{Kind: UnavailableQuota, Pool: pool, Offer: o, Until: at.Add(time.Minute)})
		if m.out(o, at) || !m.unavailable(pool, o, at) || m.unavailable(pool+"x", o, at) {
			t.Fatal("a region out of quota is not found by its pool alone")
		}
		m.Fail(o, "", at)
		if !m.out(o, at) {
			t.Fatal("a failed offer is not backing off")
		}
	}
}
