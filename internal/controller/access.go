package controller

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// JobProject returns the project of a job or array job.
func (c *Controller) JobProject(id string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if j, ok := c.st.Job(id); ok {
		return j.Project, true
	}
	if tasks := c.st.ArrayTasks(id); len(tasks) > 0 {
		return tasks[0].Project, true
	}
	return "", false
}

// admitLocked applies the policy of the submission's project (its Project
// document, if declared) to the spec: allowed GPU models, GPUs per job,
// allowed regions (data residency) and price. A job that leaves regions or
// price open inherits the project's limits, so the scheduler enforces them;
// one that asks for more is refused with field paths. Callers hold c.mu.
func (c *Controller) admitLocked(s *Submission) model.FieldErrors {
	var p *model.Project
	for _, x := range c.fleet.projects {
		if x.Name == s.Project {
			p = x
		}
	}
	fe := admitData(p, s.Project, &s.Spec, s.Trusted)
	if p == nil {
		return fe
	}
	pol := p.Spec
	res := s.Spec.Resources
	if len(pol.AllowedGPUs) > 0 && res.GPUs > 0 {
		if len(res.GPU.Models) == 0 {
			fe.Add("spec.resources.gpu.models", fmt.Sprintf("project %s allows only %s: name the models", p.Name, strings.Join(pol.AllowedGPUs, ", ")))
		}
		for i, m := range res.GPU.Models {
			if !slices.ContainsFunc(pol.AllowedGPUs, func(a string) bool { return strings.EqualFold(a, m) }) {
				fe.Add(fmt.Sprintf("spec.resources.gpu.models[%d]", i), fmt.Sprintf("project %s does not allow %s (allowed: %s)", p.Name, m, strings.Join(pol.AllowedGPUs, ", ")))
			}
		}
	}
	if total := float64(max(1, s.Spec.Replicas)) * res.GPUs; pol.MaxGPUsPerJob > 0 && total > pol.MaxGPUsPerJob {
		fe.Add("spec.resources.gpus", fmt.Sprintf("the job asks for %g GPUs; project %s allows at most %g per job", total, p.Name, pol.MaxGPUsPerJob))
	}
	if pol.MaxPricePerHour > 0 {
		switch {
		case s.Spec.MaxPricePerHour == 0:
			s.Spec.MaxPricePerHour = pol.MaxPricePerHour
		case s.Spec.MaxPricePerHour > pol.MaxPricePerHour:
			fe.Add("spec.maxPricePerHour", fmt.Sprintf("project %s allows at most $%g/h", p.Name, pol.MaxPricePerHour))
		}
	}
	if len(pol.AllowedRegions) > 0 {
		if len(s.Spec.Regions.Allow) == 0 {
			s.Spec.Regions.Allow = slices.Clone(pol.AllowedRegions)
		}
		for i, r := range s.Spec.Regions.Allow {
			if !slices.ContainsFunc(pol.AllowedRegions, func(a string) bool { ok, _ := path.Match(a, r); return a == r || ok }) {
				fe.Add(fmt.Sprintf("spec.regions.allow[%d]", i), fmt.Sprintf("%q is outside project %s's allowed regions (%s)", r, p.Name, strings.Join(pol.AllowedRegions, ", ")))
			}
		}
	}
	return fe
}
