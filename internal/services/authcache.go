package services

import (
	"container/list"
	"sync"
	"time"
)

// Bounds of a separate proxy's caller cache: the callers let in it
// remembers, and the refusals, each list evicting its least recently
// used entry when full.
const (
	maxAuthCache = 10000
	maxRefusals  = 4096
)

// callerCache remembers the server's verdicts on callers until each
// expires. Yeses and refusals are kept apart, each in a bounded
// least-recently-used list, so a client spraying made-up tokens pushes
// out only other refusals, never a caller that was let in. An expired
// yes is kept for stale more (and reported stale), so a caller let in
// can be served while it is checked again; a refusal is dropped once it
// expires.
type callerCache struct {
	mu      sync.Mutex
	yes, no lru
	stale   time.Duration
}

func newCallerCache(yes, no int, stale time.Duration) *callerCache {
	return &callerCache{yes: newLRU(yes), no: newLRU(no), stale: stale}
}

// get returns k's verdict if one is remembered at now: a refusal or a
// yes not expired (stale false), or a yes expired less than c.stale ago
// (stale true).
func (c *callerCache) get(k authKey, now time.Time) (status int, stale, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.yes.get(k, now, c.stale); ok {
		return v.status, !now.Before(v.until), true
	}
	if v, ok := c.no.get(k, now, 0); ok {
		return v.status, false, true
	}
	return 0, false, false
}

// put remembers k's status (0: let in) until until, replacing any
// earlier verdict on k (a revoked token's yes goes with its refusal).
func (c *callerCache) put(k authKey, status int, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := verdict{status: status, until: until}
	if status == 0 {
		c.no.remove(k)
		c.yes.put(k, v)
		return
	}
	c.yes.remove(k)
	c.no.put(k, v)
}

// sizes returns how many yeses and refusals are remembered.
func (c *callerCache) sizes() (yes, no int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.yes.items), len(c.no.items)
}

// lru is a bounded map of verdicts that evicts its least recently used
// entry (callerCache holds the lock).
type lru struct {
	max   int
	items map[authKey]*list.Element
	order *list.List // of *lruEntry, most recently used first
}

type lruEntry struct {
	key authKey
	v   verdict
}

func newLRU(max int) lru {
	return lru{max: max, items: map[authKey]*list.Element{}, order: list.New()}
}

// get returns k's verdict unless it expired more than grace before now
// (then it is forgotten).
func (l *lru) get(k authKey, now time.Time, grace time.Duration) (verdict, bool) {
	e, ok := l.items[k]
	if !ok {
		return verdict{}, false
	}
	v := e.Value.(*lruEntry).v
	if !now.Before(v.until.Add(grace)) {
		l.order.Remove(e)
		delete(l.items, k)
		return verdict{}, false
	}
	l.order.MoveToFront(e)
	return v, true
}

func (l *lru) put(k authKey, v verdict) {
	if e, ok := l.items[k]; ok {
		e.Value.(*lruEntry).v = v
		l.order.MoveToFront(e)
		return
	}
	if len(l.items) >= l.max {
		old := l.order.Back()
		l.order.Remove(old)
		delete(l.items, old.Value.(*lruEntry).key)
	}
	l.items[k] = l.order.PushFront(&lruEntry{key: k, v: v})
}

func (l *lru) remove(k authKey) {
	if e, ok := l.items[k]; ok {
		l.order.Remove(e)
		delete(l.items, k)
	}
}
