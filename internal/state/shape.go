package state

import (
	"sort"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// ShapeKey is what makes two nodes interchangeable to the scheduler:
// provider, region, placement group, state, capacity type, price, sharing,
// isolation and runtimes, GPUs (model, memory, NVLink group) and labels.
func ShapeKey(n *model.Node) string {
	var b strings.Builder
	b.Grow(96)
	b.WriteString(n.Provider)
	b.WriteByte('|')
	b.WriteString(n.Region)
	b.WriteByte('|')
	b.WriteString(n.Labels[model.LabelPlacementGroup])
	b.WriteByte('|')
	b.WriteString(string(n.State))
	b.WriteByte('|')
	b.WriteString(string(n.CapacityType))
	b.WriteByte('|')
	b.WriteString(strconv.FormatFloat(n.PricePerHour, 'g', -1, 64))
	if n.SharedGPUs {
		b.WriteString("|shared")
	}
	if n.Driver != "" {
		b.WriteString("|driver:")
		b.WriteString(n.Driver)
	}
	if n.NotIsolated {
		b.WriteString("|not-isolated")
	}
	// The deadline rule weighs a spot node by these.
	if n.InterruptionRate > 0 || n.RestartTime > 0 {
		b.WriteString("|risk:")
		b.WriteString(strconv.FormatFloat(n.InterruptionRate, 'g', -1, 64))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(int64(n.RestartTime), 36))
	}
	for _, r := range n.Runtimes {
		b.WriteString("|rt:")
		b.WriteString(r)
	}
	b.WriteByte('|')
	for _, g := range n.GPUs {
		b.WriteString(g.Model)
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(int64(g.Memory), 36))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(g.NVLinkGroup))
		b.WriteByte(',')
	}
	if len(n.Labels) > 0 {
		keys := make([]string, 0, len(n.Labels))
		for k := range n.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b.WriteByte('|')
			b.WriteString(k)
			b.WriteByte('=')
			b.WriteString(n.Labels[k])
		}
	}
	return b.String()
}
