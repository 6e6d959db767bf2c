package agent

import (
	"math/rand/v2"
	"time"
)

// backoff is the wait between retries of a failing call: it doubles from
// min up to max, and each wait is drawn from its upper half so that agents
// retrying against a server that comes back do not arrive in step.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
}

// next returns the wait before the next retry.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	half := b.cur / 2
	return b.cur - half + rand.N(half+1)
}

// reset starts over after a success.
func (b *backoff) reset() { b.cur = 0 }
