package controller

import (
	"github.com/gpufleet/gpufleet/internal/store"
)

// Replicate applies a batch another replica (the leader) committed, from
// the store's change feed, to a follower's controller, which serves reads
// and runs no loops: jobs, attempts, nodes, queues, events, idempotency
// records, tokens and grants, with the store's rules (an older version
// never replaces a newer one). What a follower does not serve — the
// ledger's rollups, budgets, the outbox, secrets, revisions — is not
// applied here; a follower that takes over builds its controller from
// the replica's full mirror instead (internal/server, follow.go).
func (c *Controller) Replicate(b *store.Batch) {
	c.id.Replicate(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, j := range b.Jobs {
		if old, ok := c.st.Job(j.ID); !ok || j.Version >= old.Version {
			c.st.PutJob(j)
			c.seq = max(c.seq, j.Seq)
		}
	}
	for _, n := range b.Nodes {
		if old, ok := c.st.Node(n.ID); !ok || n.Version >= old.Version {
			c.st.PutNode(n)
		}
	}
	for _, a := range b.Attempts {
		if old, ok := c.st.Attempt(a.ID); !ok || a.Version >= old.Version {
			c.st.PutAttempt(a)
		}
	}
	for _, q := range b.Queues {
		if old, ok := c.st.Queue(q.Name); !ok || q.Version >= old.Version {
			c.st.PutQueue(q)
		}
	}
	for _, name := range b.DeleteQueues {
		c.st.DeleteQueue(name)
	}
	for _, r := range b.Idempotency {
		c.idem[idemKey{r.Subject, r.Key}] = r
	}
	for _, e := range b.Events {
		if e.Seq <= c.eventSeq {
			continue // the feed repeats nothing; a reset mirror may
		}
		c.eventSeq = e.Seq
		c.events = append(c.events, e)
	}
	if len(c.events) > maxEvents+maxEvents/4 {
		c.events = append(c.events[:0:0], c.events[len(c.events)-maxEvents:]...)
	}
	c.broadcastLocked()
}
