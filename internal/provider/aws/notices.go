package aws

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet/internal/provider"
)

// ReasonSpotInterruption is the Notice.Reason of an EC2 spot interruption.
const ReasonSpotInterruption = "spot-interruption"

var (
	_ provider.InterruptionWatcher = (*Provider)(nil)
	_ provider.NoticeSink          = (*Provider)(nil)
	_ provider.SelfJoining         = (*Provider)(nil)
)

// SelfJoining declares that an instance's agent, started by its
// user-data, registers its node (after exchanging its join token).
func (p *Provider) SelfJoining() {}

// ReportNotice records a spot interruption notice for one of this pool's
// instances, as the instance's agent read it from instance metadata and
// carried it on a sync. EC2 has no API that lists such notices, so the
// instances' own reports are the driver's source; the caller must have
// checked that the reporting agent is that instance's node. An instance
// keeps the first deadline reported for it. Safe for concurrent use.
func (p *Provider) ReportNotice(n provider.Notice) error {
	if !strings.HasPrefix(n.InstanceID, "i-") || n.Deadline.IsZero() || n.IssuedAt.IsZero() || n.Deadline.Before(n.IssuedAt) {
		return fmt.Errorf("recording a notice: %+v needs an instance id, an issue time and a deadline after it", n)
	}
	if n.Reason == "" {
		n.Reason = ReasonSpotInterruption
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.notices == nil {
		p.notices = map[string]provider.Notice{}
	}
	if _, ok := p.notices[n.InstanceID]; !ok {
		p.notices[n.InstanceID] = n
	}
	return nil
}

// Notices returns the reported notices, issued by now, of instances List
// still returns,
// ordered by deadline then instance id, and forgets those of instances that
// are gone. Errors: List's.
func (p *Provider) Notices(ctx context.Context) ([]provider.Notice, error) {
	p.mu.Lock()
	empty := len(p.notices) == 0
	p.mu.Unlock()
	if empty {
		return []provider.Notice{}, nil // no EC2 call while nothing was reported
	}
	live, err := p.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing instances for their notices: %w", err)
	}
	alive := map[string]bool{}
	for _, in := range live {
		alive[in.ID] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.opts.Clock.Now()
	out := []provider.Notice{}
	for id, n := range p.notices {
		switch {
		case !alive[id]:
			delete(p.notices, id)
		case !n.IssuedAt.After(now):
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b provider.Notice) int {
		if c := a.Deadline.Compare(b.Deadline); c != 0 {
			return c
		}
		return strings.Compare(a.InstanceID, b.InstanceID)
	})
	return out, nil
}
