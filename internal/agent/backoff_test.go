package agent

import (
	"testing"
	"time"
)

func TestBackoffDoublesToItsCapWithJitter(t *testing.T) {
	t.Parallel()
	b := backoff{min: 100 * time.Millisecond, max: 800 * time.Millisecond}
	check := func(step int, hi time.Duration) {
		t.Helper()
		if d := b.next(); d < hi/2 || d > hi {
			t.Errorf("step %d: wait %v; want within [%v, %v]", step, d, hi/2, hi)
		}
	}
	for i, hi := range []time.Duration{100, 200, 400, 800, 800, 800} {
		check(i, hi*time.Millisecond)
	}
	b.reset()
	check(0, 100*time.Millisecond)
}
