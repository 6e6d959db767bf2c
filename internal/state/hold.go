package state

import (
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Hold keeps the queued jobs in a budget's scope waiting until Until: the
// scope of a budget that blocks new work, or whose stop threshold fired
// this period (so a job it stopped resumes in the next period). The
// scheduler gives a held job a verdict of the hold's reason and places
// nothing of it.
type Hold struct {
	Scope model.BudgetScope
	Until time.Time
	// SpotOnly holds only jobs that may run on spot (a stop-spot
	// threshold).
	SpotOnly bool
	Reason   string
}
