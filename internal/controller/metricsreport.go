package controller

import (
	"context"
	"fmt"

	"github.com/gpufleet/gpufleet/internal/cost/earlystop"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// ExperimentTag is the job tag that makes jobs peers for median stopping.
const ExperimentTag = "experiment"

// ReportMetrics records a job's metric report for its current attempt and
// applies the job's early-stop policy (spec.earlyStop), with peers sharing
// its experiment tag. In stop mode a triggered policy stops the attempt
// through the drain path (checkpoint signal, grace period) and the job ends
// stopped-early with the reason. Steps repeated after a resume replace the
// earlier values (earlystop.FromReports). An ended job is a conflict.
func (c *Controller) ReportMetrics(ctx context.Context, jobID string, step int64, values map[string]float64) (earlystop.Verdict, error) {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	j, ok := c.st.Job(jobID)
	if !ok {
		c.mu.Unlock()
		return earlystop.Verdict{}, fmt.Errorf("job %s: %w", jobID, ErrNotFound)
	}
	if j.State.Terminal() {
		c.mu.Unlock()
		return earlystop.Verdict{}, fmt.Errorf("job %s already ended %s: %w", jobID, j.State, ErrConflict)
	}
	reports := c.cost.metrics[jobID]
	m := store.MetricReport{JobID: jobID, Seq: int64(len(reports)) + 1, Attempt: j.Attempts, Step: step, Values: values, At: now}
	c.cost.metrics[jobID] = append(reports, m)
	b := &store.Batch{Cost: store.Cost{Metrics: []store.MetricReport{m}}}
	var v earlystop.Verdict
	if es := j.Spec.EarlyStop; es != nil {
		p := earlystop.FromSpec(es)
		v = earlystop.Decide(p, c.seriesLocked(jobID, p.Metric), c.peersLocked(j, p.Metric))
		if v.Triggered {
			c.cfg.Log.Info("early stop triggered", "job_id", jobID, "step", v.Step, "stop", v.Stop, "reason", v.Reason)
		}
		if a, live := c.st.LiveAttempt(jobID); v.Stop && live && !a.Stop {
			a = a.Clone()
			a.Stop, a.StopState, a.StopWhy = true, model.AttemptStoppedEarly, "early stop: "+v.Reason
			a.Version++
			c.st.PutAttempt(a)
			b.Attempts = append(b.Attempts, a)
			c.bumpNodesLocked(a)
		}
	}
	cm := c.com.submit(b)
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return v, fmt.Errorf("recording metrics: %w", err)
	}
	return v, nil
}

func (c *Controller) seriesLocked(jobID, metric string) earlystop.Series {
	reports := c.cost.metrics[jobID]
	rs := make([]earlystop.Report, len(reports))
	for i, r := range reports {
		rs[i] = earlystop.Report{Step: r.Step, Values: r.Values}
	}
	return earlystop.FromReports(rs, metric)
}

// peersLocked returns the series of the other jobs with j's experiment tag.
func (c *Controller) peersLocked(j *model.Job, metric string) []earlystop.Series {
	exp := j.Tags[ExperimentTag]
	if exp == "" {
		return nil
	}
	var peers []earlystop.Series
	for id := range c.cost.metrics {
		if id == j.ID {
			continue
		}
		if p, ok := c.st.Job(id); ok && p.Tags[ExperimentTag] == exp {
			peers = append(peers, c.seriesLocked(id, metric))
		}
	}
	return peers
}

// Metrics returns a job's metric reports in arrival order.
func (c *Controller) MetricReports(jobID string) []store.MetricReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]store.MetricReport(nil), c.cost.metrics[jobID]...)
}
