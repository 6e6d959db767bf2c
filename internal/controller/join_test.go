package controller

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/store"
)

// joiningCloud is a fakeCloud whose instances run their own agents
// (SelfJoining) and whose notices come from them (NoticeSink), as EC2's.
type joiningCloud struct {
	*fakeCloud
	nmu      sync.Mutex
	reported []provider.Notice
}

func (j *joiningCloud) SelfJoining() {}

func (j *joiningCloud) ReportNotice(n provider.Notice) error {
	j.nmu.Lock()
	defer j.nmu.Unlock()
	j.reported = append(j.reported, n)
	return nil
}

func (j *joiningCloud) Notices(context.Context) ([]provider.Notice, error) {
	j.nmu.Lock()
	defer j.nmu.Unlock()
	return append([]provider.Notice(nil), j.reported...), nil
}

// TestLaunchedInstanceJoinsAndIsDrainedByItsNotice: a launched node waits
// for its agent (no virtual start); the join token is exchanged once, and
// only for the instance the launch returned; the agent registering as an
// owned machine keeps the launch's provider and instance; a notice its
// sync carries for another instance is ignored, one for its own reaches
// the driver and the scale loop drains the node.
func TestLaunchedInstanceJoinsAndIsDrainedByItsNotice(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	cloud := &joiningCloud{fakeCloud: &fakeCloud{offers: []model.Offer{cloudA}}}
	st := openSQLite(t, filepath.Join(t.TempDir(), "gpufleet.db"))
	defer st.Close()
	c := newCloudController(t, clk, st, cloud)
	defer c.Close()
	submitTrain(t, c, func(*model.JobSpec) {})
	if err := c.pass(ctx); err != nil {
		t.Fatal(err)
	}
	c.scaleWait(ctx)
	nodes := c.Nodes()
	if len(nodes) != 1 || nodes[0].Labels[model.LabelInstance] == "" {
		t.Fatalf("nodes after a scale cycle: %+v, want one launched", nodes)
	}
	node, iid := nodes[0].ID, nodes[0].Labels[model.LabelInstance]
	stored := func() *model.Node {
		c.mu.Lock()
		defer c.mu.Unlock()
		n, _ := c.st.Node(node)
		return n
	}
	cloud.run()
	c.scaleWait(ctx)
	if n := stored(); n.State != model.NodeLaunching || len(n.GPUs) != 0 {
		t.Fatalf("a self-joining node was started without its agent: %s with %d GPUs", n.State, len(n.GPUs))
	}

	secret, err := c.Identity().MintJoinToken(ctx, "gpu", node, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Join(ctx, secret, "i-someone-else"); !errors.Is(err, agentapi.ErrJoinRefused) {
		t.Fatalf("join from another instance: %v, want ErrJoinRefused", err)
	}
	resp, err := c.Join(ctx, secret, iid)
	if err != nil {
		t.Fatalf("join from the launched instance: %v", err)
	}
	if resp.NodeID != node {
		t.Fatalf("joined as %s, want %s", resp.NodeID, node)
	}
	if tok, err := c.Identity().Authenticate(resp.Token); err != nil || tok.Kind != model.TokenAgent || tok.Subject != node {
		t.Fatalf("the joined agent token: %+v, %v", tok, err)
	}
	if _, err := c.Join(ctx, secret, iid); !errors.Is(err, agentapi.ErrJoinRefused) {
		t.Fatalf("second join: %v, want ErrJoinRefused", err)
	}

	gpus := make([]model.GPU, 8)
	for i := range gpus {
		gpus[i] = model.GPU{Index: i, UUID: "GPU-" + node + "-" + string(rune('0'+i)), Model: "H100", Memory: 80 * model.GiB}
	}
	if _, err := c.Register(ctx, agentapi.Registration{NodeID: node, Name: iid, Provider: "static", CapacityType: model.Owned, GPUs: gpus,
		Labels: map[string]string{model.LabelInstance: "i-claimed"}}); err != nil {
		t.Fatal(err)
	}
	n := stored()
	if n.State != model.NodeReady || n.Provider != "cloud" || n.Labels[model.LabelInstance] != iid || n.CapacityType != model.OnDemand {
		t.Fatalf("registered node: %s provider %s instance %s %s; want ready, the launch's cloud, instance %s and capacity", n.State, n.Provider, n.Labels[model.LabelInstance], n.CapacityType, iid)
	}

	notice := func(id string) agentapi.SyncRequest {
		return agentapi.SyncRequest{NodeID: node, Notices: []agentapi.Notice{{Kind: agentapi.NoticeInterruption, Source: "aws-imds", InstanceID: id,
			IssuedAt: clk.Now(), Deadline: clk.Now().Add(2 * time.Minute), Action: "terminate"}}}
	}
	if _, err := c.Sync(ctx, notice("i-someone-else")); err != nil {
		t.Fatal(err)
	}
	if got, _ := cloud.Notices(ctx); len(got) != 0 {
		t.Fatalf("a notice for another instance reached the driver: %+v", got)
	}
	if _, err := c.Sync(ctx, notice(iid)); err != nil {
		t.Fatal(err)
	}
	if got, _ := cloud.Notices(ctx); len(got) != 1 || got[0].InstanceID != iid || !got[0].Deadline.Equal(clk.Now().Add(2*time.Minute)) {
		t.Fatalf("notices the driver holds: %+v", got)
	}
	c.scaleWait(ctx)
	if n := stored(); n.State != model.NodeDraining {
		t.Fatalf("node after its notice: %s, want draining", n.State)
	}
}

// TestRemovedPoolIsRetired: the instances launched into a pool a fleet
// revision removes are terminated by the pool's driver, then the pool is
// forgotten.
func TestRemovedPoolIsRetired(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	cloud := &joiningCloud{fakeCloud: &fakeCloud{offers: []model.Offer{cloudA}}}
	st := openSQLite(t, filepath.Join(t.TempDir(), "gpufleet.db"))
	defer st.Close()
	c := newCloudController(t, clk, st, cloud)
	defer c.Close()
	submitTrain(t, c, func(*model.JobSpec) {})
	if err := c.pass(ctx); err != nil {
		t.Fatal(err)
	}
	c.scaleWait(ctx)
	nodes := c.Nodes()
	if len(nodes) != 1 || nodes[0].Labels[model.LabelInstance] == "" {
		t.Fatalf("nodes after a scale cycle: %+v, want one launched", nodes)
	}
	c.mu.Lock()
	c.retirePoolsLocked(&store.Batch{}, c.fleet.pools, nil)
	c.fleet.pools = nil
	c.mu.Unlock()
	c.scaleWait(ctx)
	if n := c.Nodes()[0]; n.State != model.NodeTerminated {
		t.Fatalf("the removed pool's node is %s, want terminated", n.State)
	}
	terminated := false
	for _, ev := range c.Events(EventFilter{}) {
		terminated = terminated || ev.Fields["reason"] == ReasonPoolRemoved
	}
	if !terminated {
		t.Error("no termination event with reason " + ReasonPoolRemoved)
	}
	c.scaleWait(ctx)
	c.mu.Lock()
	left := len(c.scaleSt.retired)
	c.mu.Unlock()
	if left != 0 {
		t.Errorf("%d retired pools remembered after their nodes are gone", left)
	}
}
