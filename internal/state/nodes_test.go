package state

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// TestNodeOrders holds the incrementally kept node orders (every node, the
// active ones and the unpooled instances by id, the stopped ones by stop time) to the same lists
// computed from scratch, through random launches, terminations, stop
// times moved and nodes coming back.
func TestNodeOrders(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := New()
	all := map[string]*model.Node{}
	for step := range 3000 {
		var n *model.Node
		if len(all) == 0 || rng.IntN(3) == 0 {
			n = &model.Node{ID: fmt.Sprintf("n%04d", rng.IntN(5000)), State: model.NodeReady}
			if rng.IntN(2) == 0 {
				n.Labels = map[string]string{model.LabelInstance: "i-" + n.ID}
			}
		} else {
			ids := make([]string, 0, len(all))
			for id := range all {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			n = all[ids[rng.IntN(len(ids))]].Clone()
			if rng.IntN(5) == 0 {
				n.Pool = []string{"", "p"}[rng.IntN(2)]
			}
			switch rng.IntN(4) {
			case 0:
				n.State, n.StoppedAt = model.NodeReady, time.Time{}
			case 1:
				n.State = model.NodeTerminated // sometimes without a stop time
			default:
				n.State, n.StoppedAt = model.NodeTerminated, t0.Add(time.Duration(rng.IntN(100))*time.Minute)
			}
		}
		all[n.ID] = n
		s.PutNode(n)

		var every, active, unpooled []string
		for id, n := range all {
			every = append(every, id)
			if n.Pool == "" && n.Labels[model.LabelInstance] != "" {
				unpooled = append(unpooled, id)
			}
			if n.State != model.NodeTerminated {
				active = append(active, id)
			}
		}
		slices.Sort(every)
		slices.Sort(active)
		slices.Sort(unpooled)
		if got := ids(s.UnpooledInstances()); !slices.Equal(got, unpooled) {
			t.Fatalf("step %d: UnpooledInstances %v, want %v", step, got, unpooled)
		}
		if got := ids(s.Nodes()); !slices.Equal(got, every) {
			t.Fatalf("step %d: Nodes %v, want %v", step, got, every)
		}
		if got := ids(s.ActiveNodes()); !slices.Equal(got, active) {
			t.Fatalf("step %d: ActiveNodes %v, want %v", step, got, active)
		}
		for _, n := range s.ActiveNodes() { // kept between puts: never a replaced record
			if cur, _ := s.Node(n.ID); cur != n {
				t.Fatalf("step %d: ActiveNodes holds an old record of %s", step, n.ID)
			}
		}
		at := t0.Add(time.Duration(rng.IntN(100)) * time.Minute)
		var stopped []*model.Node
		for _, n := range all {
			if n.State == model.NodeTerminated && !n.StoppedAt.IsZero() && n.StoppedAt.After(at) {
				stopped = append(stopped, n)
			}
		}
		sort.Slice(stopped, func(i, j int) bool {
			if !stopped[i].StoppedAt.Equal(stopped[j].StoppedAt) {
				return stopped[i].StoppedAt.Before(stopped[j].StoppedAt)
			}
			return stopped[i].ID < stopped[j].ID
		})
		if got := ids(s.NodesStoppedAfter(at)); !slices.Equal(got, ids(stopped)) {
			t.Fatalf("step %d: NodesStoppedAfter(%s) %v, want %v", step, at, got, ids(stopped))
		}
	}
}

func ids(nodes []*model.Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.ID
	}
	return out
}
