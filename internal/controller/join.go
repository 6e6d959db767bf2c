package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// JoinAgentTTL is how long the agent token a join exchange mints is
// valid: longer than any instance is expected to live.
const JoinAgentTTL = 366 * 24 * time.Hour

// Join exchanges a launched instance's one-time join token (secret) for
// its node's agent token, once, and only for the instance the launch
// returned for that node (instanceID must be the node's instance label).
// A node whose launch has not returned yet is refused with
// model.ErrConflict (the agent retries); every other refusal wraps
// agentapi.ErrJoinRefused.
func (c *Controller) Join(ctx context.Context, secret, instanceID string) (agentapi.JoinResponse, error) {
	tok, agentSecret, err := c.id.ExchangeJoin(ctx, secret, JoinAgentTTL, func(join *model.Token) error {
		c.mu.Lock()
		n, ok := c.st.Node(join.Subject)
		c.mu.Unlock()
		if !ok || n.State == model.NodeTerminated {
			return fmt.Errorf("node %s is not a live launched node: %w", join.Subject, agentapi.ErrJoinRefused)
		}
		switch iid := n.Labels[model.LabelInstance]; {
		case iid == "" && n.State == model.NodeLaunching:
			return fmt.Errorf("node %s: its launch has not returned an instance yet, retry: %w", join.Subject, model.ErrConflict)
		case iid == "" || instanceID != iid:
			return fmt.Errorf("node %s was launched as instance %q, not %q: %w", join.Subject, iid, instanceID, agentapi.ErrJoinRefused)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrUnauthenticated) {
			err = fmt.Errorf("%w: %w", agentapi.ErrJoinRefused, err)
		}
		return agentapi.JoinResponse{}, err
	}
	c.cfg.Log.Info("instance joined", "node_id", tok.Subject, "instance", instanceID)
	return agentapi.JoinResponse{NodeID: tok.Subject, Token: agentSecret}, nil
}

// reportNotices hands the interruption notices an agent carried on its
// sync to its pool's driver, when that driver learns notices from its
// instances (provider.NoticeSink); the scale loop then drains the node
// from the driver's Notices. A notice is taken only for the node's own
// instance, the one its launch returned.
func (c *Controller) reportNotices(n *model.Node, notices []agentapi.Notice) {
	iid := n.Labels[model.LabelInstance]
	if len(notices) == 0 || iid == "" || n.Pool == "" {
		return
	}
	c.mu.Lock()
	var pool *model.NodePool
	pools := c.fleet.pools
	if len(pools) == 0 {
		pools = c.cfg.Scale.DefaultPools
	}
	for _, p := range pools {
		if p.Name == n.Pool {
			pool = p
		}
	}
	c.mu.Unlock()
	if pool == nil {
		return
	}
	sink, ok := c.driverFor(pool).(provider.NoticeSink)
	if !ok {
		return
	}
	for _, nt := range notices {
		if nt.Kind != agentapi.NoticeInterruption {
			continue
		}
		if nt.InstanceID != iid {
			c.cfg.Log.Warn("agent reported a notice for another instance", "node_id", n.ID, "instance", iid, "notice_instance", nt.InstanceID)
			continue
		}
		if err := sink.ReportNotice(provider.Notice{InstanceID: iid, IssuedAt: nt.IssuedAt, Deadline: nt.Deadline}); err != nil {
			c.cfg.Log.Warn("recording an agent's notice", "node_id", n.ID, "err", err)
		}
	}
}
