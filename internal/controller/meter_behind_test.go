package controller

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// TestLoadUnreadableMarks: a stored cost.metered_behind the leader cannot
// read is logged as an error with its key and value, and each node it may
// have held is taken as metered to where its last ledger row ends (or from
// when it came up, with no row), never as metered to the global mark.
func TestLoadUnreadableMarks(t *testing.T) {
	at := func(hm string) time.Time {
		v, err := time.Parse("15:04", hm)
		if err != nil {
			t.Fatal(err)
		}
		return t0.Truncate(24 * time.Hour).Add(v.Sub(v.Truncate(24 * time.Hour)))
	}
	row := func(node, from, to string) model.LedgerEntry {
		return model.LedgerEntry{Kind: model.LedgerIdle, NodeID: node, From: at(from), To: at(to)}
	}
	d := &store.Dump{
		Nodes: []*model.Node{
			{ID: "held", RegisteredAt: at("08:00")},                         // rows to 10:00
			{ID: "current", RegisteredAt: at("08:00")},                      // rows to the mark
			{ID: "new", RegisteredAt: at("08:00"), LaunchedAt: at("10:02")}, // no row yet
			{ID: "gone", RegisteredAt: at("08:00"), StoppedAt: at("09:00")}, // rows to its stop
			{ID: "readable", RegisteredAt: at("08:00")},                     // its entry reads
		},
		Cost: store.Cost{Ledger: []model.LedgerEntry{
			row("held", "09:00", "10:00"), row("current", "09:00", "10:00"), row("current", "10:00", "10:05"),
			row("gone", "08:00", "09:00"), row("readable", "09:00", "10:01"),
		}},
	}
	for _, tc := range []struct {
		name, value string
		want        map[string]time.Time
	}{
		{"entry", `{"held":"10:00","readable":"` + at("10:01").Format(time.RFC3339) + `"}`,
			map[string]time.Time{"held": at("10:00"), "readable": at("10:01")}},
		{"value", `held=10:00`,
			map[string]time.Time{"held": at("10:00"), "new": at("10:02"), "readable": at("10:01")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			c := &Controller{cfg: Config{Log: slog.New(slog.NewTextHandler(&logs, nil))}}
			d.Meta = map[string]string{store.MeteredToKey: at("10:05").Format(time.RFC3339), store.MeterBehindKey: tc.value}
			c.loadCost(d)
			if len(c.cost.behind) != len(tc.want) {
				t.Errorf("behind = %v, want %v", c.cost.behind, tc.want)
			}
			for id, w := range tc.want {
				if got := c.cost.behind[id]; !got.Equal(w) {
					t.Errorf("node %s is metered to %s, want %s", id, got.Format(time.TimeOnly), w.Format(time.TimeOnly))
				}
			}
			out := logs.String()
			for _, s := range []string{"level=ERROR", "key=" + store.MeterBehindKey, "value=" + strconv.Quote(tc.value)} {
				if !strings.Contains(out, s) {
					t.Errorf("log %q does not say %q", out, s)
				}
			}
		})
	}
}
