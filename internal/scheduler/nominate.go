package scheduler

// nominated is GPUs of one node that preemption freed (or is freeing) for
// one pending job.
type nominated struct {
	node int32
	// mask is every nominated GPU; held those of them free at the
	// snapshot, which the pass withholds from other jobs.
	mask, held uint64
}

// applyNominations withholds the free GPUs of every unexpired nomination
// from the working cluster; only the nominated job gets them back (see
// unhold). The GPUs still draining are remembered in nomMask, so no other
// job counts on them either (see preempt).
func (s *sched) applyNominations() {
	if len(s.snap.Nominations) == 0 {
		return
	}
	byID := make(map[string]int32, len(s.snap.Nodes))
	for i := range s.snap.Nodes {
		byID[s.snap.Nodes[i].Node.ID] = int32(i)
	}
	s.nominated = map[string][]nominated{}
	s.nomMask = map[int32]uint64{}
	for _, n := range s.snap.Nominations {
		if !s.now.Before(n.Expires) {
			continue
		}
		s.wakeAt(n.Expires)
		for _, ng := range n.GPUs {
			ni, ok := byID[ng.NodeID]
			if !ok {
				continue
			}
			var m uint64
			for _, g := range ng.GPUs {
				if g >= 0 && g < maxNodeGPUs {
					m |= 1 << uint(g)
				}
			}
			ns := &s.c.nodes[ni]
			held := m & ns.free
			s.c.setFree(ni, ns.free&^held)
			s.nomMask[ni] |= m
			s.nominated[n.JobID] = append(s.nominated[n.JobID], nominated{node: ni, mask: m, held: held})
		}
	}
}

// unhold returns a job's nominated free GPUs to the working cluster
// before it is scheduled; rehold withholds them again if it was not bound.
func (s *sched) unhold(jobID string) []nominated {
	ns := s.nominated[jobID]
	if len(ns) > 0 {
		s.epoch++
	}
	for _, n := range ns {
		st := &s.c.nodes[n.node]
		s.c.setFree(n.node, st.free|n.held)
	}
	return ns
}

func (s *sched) rehold(ns []nominated) {
	if len(ns) > 0 {
		s.epoch++
	}
	for _, n := range ns {
		st := &s.c.nodes[n.node]
		s.c.setFree(n.node, st.free&^n.held)
	}
}

// nominatedToOthers reports whether any GPU of r is nominated for a job
// other than jobID.
func (s *sched) nominatedToOthers(r *liveRef, jobID string) bool {
	for _, nm := range r.masks {
		ni, m := nm.node, nm.mask
		other := s.nomMask[ni] & m
		if other == 0 {
			continue
		}
		for _, n := range s.nominated[jobID] {
			if n.node == ni {
				other &^= n.mask
			}
		}
		if other != 0 {
			return true
		}
	}
	return false
}
