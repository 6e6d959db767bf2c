package budgets

import (
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

// State is the budget passes' outcome. Its methods are safe for
// concurrent use; what they return is never changed afterwards (a pass
// replaces it), and callers must not change it.
type State struct {
	mu     sync.RWMutex
	fired  map[model.FiredKey]bool
	blocks []cost.Block
	spend  map[string]cost.Spend
	// stopSpot and stopAll are running-job stops still in force: scopes
	// whose stop-spot or stop-all fired this period, so requeued jobs
	// wait.
	stopSpot, stopAll []cost.Block
}

// New returns the state with the stored fired keys.
func New(fired []model.FiredKey) *State {
	s := &State{fired: make(map[model.FiredKey]bool, len(fired))}
	for _, k := range fired {
		s.fired[k] = true
	}
	return s
}

// Fired returns a copy of the fired set, for cost.Evaluate.
func (s *State) Fired() map[model.FiredKey]bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.fired)
}

// Len returns how many keys have fired, over every period.
func (s *State) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.fired)
}

// Record takes one pass's outcome at now: the keys that fired, the blocks
// admission applies and each budget's spend; the holds on queued jobs are
// derived from budgets (the declared ones) and every key fired so far.
// With no budgets, it clears the period's state (fired keys stay).
func (s *State) Record(budgets []model.Budget, fired []model.FiredKey, blocks []cost.Block, spend map[string]cost.Spend, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range fired {
		s.fired[k] = true
	}
	s.blocks, s.spend, s.stopSpot, s.stopAll = blocks, spend, nil, nil
	for _, bu := range budgets {
		start, end := bu.Period.Bounds(now)
		for i, t := range bu.Thresholds {
			if !s.fired[model.FiredKey{Budget: bu.Name, Threshold: i, PeriodStart: start}] {
				continue
			}
			bl := cost.Block{Budget: bu.Name, Scope: bu.Scope, Until: end,
				Reason: fmt.Sprintf("budget %s (%s): %s fired at %g%% this period; held until %s", bu.Name, bu.Scope, t.Action, t.Percent, end.Format(time.DateOnly))}
			switch t.Action {
			case model.ActionStopSpot:
				s.stopSpot = append(s.stopSpot, bl)
			case model.ActionStopAll:
				s.stopAll = append(s.stopAll, bl)
			}
		}
	}
}

// Holds returns the holds on queued jobs, for the scheduler: jobs in a
// blocked (block-new, stop-all) scope, and jobs that may run on spot in a
// stop-spot scope, wait until the period ends.
func (s *State) Holds() []state.Hold {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.blocks)+len(s.stopSpot)+len(s.stopAll) == 0 {
		return nil
	}
	holds := make([]state.Hold, 0, len(s.blocks)+len(s.stopAll)+len(s.stopSpot))
	for _, lists := range [][]cost.Block{s.blocks, s.stopAll} {
		for _, bl := range lists {
			holds = append(holds, state.Hold{Scope: bl.Scope, Until: bl.Until, Reason: bl.Reason})
		}
	}
	for _, bl := range s.stopSpot {
		holds = append(holds, state.Hold{Scope: bl.Scope, Until: bl.Until, Reason: bl.Reason, SpotOnly: true})
	}
	return holds
}

// Admission returns what admission checks a submission against: the
// blocks and each budget's spend.
func (s *State) Admission() ([]cost.Block, map[string]cost.Spend) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.blocks, s.spend // replaced by Record, never changed in place
}

// Status returns, for budget bu in the period starting at start, the
// thresholds fired and whether a block of it is in force at now.
func (s *State) Status(bu model.Budget, start, now time.Time) (fired []int, blocked bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	fired = []int{}
	for i := range bu.Thresholds {
		if s.fired[model.FiredKey{Budget: bu.Name, Threshold: i, PeriodStart: start}] {
			fired = append(fired, i)
		}
	}
	for _, bl := range s.blocks {
		blocked = blocked || bl.Budget == bu.Name && now.Before(bl.Until)
	}
	return fired, blocked
}

// Spend returns a budget's spend at the last pass.
func (s *State) Spend(name string) cost.Spend {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.spend[name]
}
