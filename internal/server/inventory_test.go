package server

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
)

func TestProviderInventoryListsEveryInstance(t *testing.T) {
	if providerInventory(nil) != nil {
		t.Fatal("no providers should mean no inventory check")
	}
	ctx := context.Background()
	sp, err := sim.New(sim.Config{Clock: clock.NewFake(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)), Providers: []string{"aws"}})
	if err != nil {
		t.Fatal(err)
	}
	offers, err := sp.Offers(ctx)
	if err != nil || len(offers) == 0 {
		t.Fatalf("offers: %v", err)
	}
	inst, err := sp.Launch(ctx, provider.LaunchRequest{Offer: offers[0], Token: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := providerInventory([]provider.Provider{sp})(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{sp.Name(): {inst.ID}}, got); diff != "" {
		t.Fatalf("inventory (-want +got):\n%s", diff)
	}
	if err := sp.Terminate(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	got, _ = providerInventory([]provider.Provider{sp})(ctx)
	if len(got[sp.Name()]) != 0 {
		t.Fatalf("terminated instance still listed: %v", got)
	}
}
