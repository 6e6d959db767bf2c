package controller

// nodeGens numbers each node's desired set: an agent long-polls until its
// node's number moves. Each waiting agent waits on its own node's channel,
// closed when that number moves, so a change wakes the agents it concerns
// and not every agent of the fleet (with 1,000 agents long-polling, each
// submission used to wake all of them to compare numbers under c.mu).
// Guarded by Controller.mu; the zero value is ready.
type nodeGens struct {
	gen  map[string]uint64
	wake map[string]chan struct{}
	// moved holds the nodes bumped since the last takeMoved, once an
	// in-process agent host asked for them (track); nil until then, so
	// a server without one keeps nothing.
	moved map[string]struct{}
	track bool
}

// get is the node's current number.
func (g *nodeGens) get(nodeID string) uint64 { return g.gen[nodeID] }

// bump moves the node's number and wakes the agents waiting on it.
func (g *nodeGens) bump(nodeID string) {
	if g.gen == nil {
		g.gen = map[string]uint64{}
	}
	g.gen[nodeID]++
	if g.track {
		g.moved[nodeID] = struct{}{}
	}
	if ch, ok := g.wake[nodeID]; ok {
		close(ch)
		delete(g.wake, nodeID)
	}
}

// changed returns a channel closed at the node's next bump.
func (g *nodeGens) changed(nodeID string) <-chan struct{} {
	if g.wake == nil {
		g.wake = map[string]chan struct{}{}
	}
	ch, ok := g.wake[nodeID]
	if !ok {
		ch = make(chan struct{})
		g.wake[nodeID] = ch
	}
	return ch
}

// takeMoved appends to ids the nodes bumped since the last call (in no
// order) and forgets them; the first call starts the tracking, so it
// lists nothing that came before.
func (g *nodeGens) takeMoved(ids []string) []string {
	if !g.track {
		g.track, g.moved = true, map[string]struct{}{}
		return ids
	}
	for id := range g.moved {
		ids = append(ids, id)
	}
	clear(g.moved)
	return ids
}
