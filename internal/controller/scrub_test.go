package controller

import (
	"testing"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/secrets"
)

// TestScrubberFollowsJobTokens: a live attempt's job token is scrubbed from
// the moment its replica is handed out, and no longer once it has ended.
func TestScrubberFollowsJobTokens(t *testing.T) {
	red := &secrets.Redactor{}
	h := newHarness(t, newMemStore(), clock.NewFake(t0), func(c *Config) { c.Redactor = red })
	h.register("", 8)
	a := h.submit(cmdSpec(1))
	b := h.submit(cmdSpec(1))
	resp := h.waitDesired(2)
	tok := map[string]string{}
	for _, rs := range resp.Replicas {
		tok[rs.JobID] = rs.Env["GPUFLEET_JOB_TOKEN"]
	}
	for _, j := range []string{a.ID, b.ID} {
		if got := red.Scrub("token " + tok[j]); got != "token [redacted]" {
			t.Fatalf("live token of %s not scrubbed: %q", j, got)
		}
	}
	rs := resp.Replicas[0]
	h.sync(exited(rs.ID, 0, ""))
	h.waitJob(rs.JobID, model.JobSucceeded)
	if got := red.Scrub(tok[rs.JobID]); got != tok[rs.JobID] {
		t.Fatalf("ended attempt's token still scrubbed: %q", got)
	}
	other := resp.Replicas[1].JobID
	if got := red.Scrub(tok[other]); got != "[redacted]" {
		t.Fatalf("the other live token is no longer scrubbed: %q", got)
	}
}
