package state

import (
	"sort"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Labels that name one node rather than describe it: a node's address (the
// static agent's), its provider instance id, its hostname.
const (
	LabelAddress  = "gpufleet.dev/address"
	LabelHostname = "gpufleet.dev/hostname"
)

// UniqueLabel reports whether label key names one node instead of
// describing what it offers, so that it never decides which nodes are
// interchangeable: the address, instance-id and hostname labels, and any
// label a pool marks unique by its name, which (after any "prefix/")
// starts with "unique." as in Nomad's unique namespace:
// "unique.serial", "example.com/unique.rack-slot".
func UniqueLabel(key string) bool {
	switch key {
	case LabelAddress, LabelHostname, model.LabelInstance, "kubernetes.io/hostname":
		return true
	}
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		key = key[i+1:]
	}
	return strings.HasPrefix(key, "unique.")
}

// ShapeKey is what makes two nodes interchangeable to the scheduler:
// provider, region, placement group, state, capacity type, price, sharing,
// isolation and runtimes, GPUs (model, memory, NVLink group) and labels
// other than unique ones (UniqueLabel). A job that selects a unique label
// is matched to its node as an exception (the scheduler's cluster splits
// that node into a class of its own for the pass).
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
			if !UniqueLabel(k) {
				keys = append(keys, k)
			}
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
