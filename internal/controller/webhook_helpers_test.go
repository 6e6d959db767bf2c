package controller

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/secrets"
	"github.com/gpufleet/gpufleet/internal/store/sqlite"
)

// startSQLiteController runs a controller on the SQLite file at dbPath,
// with a keyring, node "own" priced at $36/h, a fake clock at 2026-12-01
// and no passes of its own: the test drives CostPass and deliverDue. opts
// adjust the Config before New, whose error is returned for the caller to
// judge. shutdown stops the controller and closes the store; it may be
// called early and runs at cleanup.
func startSQLiteController(t *testing.T, dbPath string, opts ...func(*Config)) (h *harness, shutdown func(), err error) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, dbPath, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keyring, err := secrets.NewKeyring(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	prices, err := cost.ParsePrices(strings.NewReader("match,value,price_per_hour\nnode,own,36\n"))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	cfg := Config{
		Store: st, Logs: logs, Clock: clk, ServerURL: "http://127.0.0.1:7777", Keyring: keyring,
		CheckpointDir: t.TempDir(), HeartbeatTimeout: 1000 * time.Hour, PassGap: -1,
		Cost:   CostConfig{Prices: prices, MeterInterval: -1},
		Alerts: AlertRules{QueueWaitP95: -1},
		Fatal:  func(err error) { t.Errorf("fatal: %v", err) },
	}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := New(ctx, cfg)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	h = &harness{t: t, clk: clk, c: c, cancel: cancel, done: make(chan struct{})}
	go func() { _ = c.Run(runCtx); close(h.done) }()
	closed := false
	shutdown = func() {
		if !closed {
			closed = true
			h.stop()
			c.Close()
			st.Close()
		}
	}
	t.Cleanup(shutdown)
	return h, shutdown, nil
}

// runJobOnOwn registers node "own" with 2 owned GPUs and waits until a
// 1-GPU job of project nlp runs there, so that CostPass bills it.
func runJobOnOwn(h *harness) {
	h.t.Helper()
	h.registerNode("own", 2, model.Owned)
	spec := model.JobSpec{Resources: model.Resources{GPUs: 1}, Run: model.RunSpec{Command: []string{"true"}}}
	spec.Default()
	j, _, err := h.c.Submit(context.Background(), Submission{Project: "nlp", User: "u", Spec: spec})
	if err != nil {
		h.t.Fatal(err)
	}
	h.node = "own"
	h.sync(running(h.waitDesired(1).Replicas[0].ID))
	h.waitJob(j.ID, model.JobRunning)
}
