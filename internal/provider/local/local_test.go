package local

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/providertest"
)

func TestConformance(t *testing.T) {
	started := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for name, gpus := range map[string][]model.GPU{
		"two H100": {{Index: 0, Model: "H100", Memory: 80 * model.GiB}, {Index: 1, Model: "H100", Memory: 80 * model.GiB}},
		"no GPUs":  nil,
		"one L4":   {{Index: 0, Model: "L4", Memory: 24 * model.GiB}},
	} {
		t.Run(name, func(t *testing.T) {
			p := New("box", gpus, 32, 256*model.GiB, started)
			providertest.Run(t, p, providertest.Options{Fixed: &providertest.Fixed{Machines: []model.Node{{
				ID: "box", Name: "box", Provider: Name, Region: Region, GPUs: gpus, CPU: 32, Memory: 256 * model.GiB,
			}}}})
		})
	}
}

func TestOffersAndInventoryDescribeTheMachine(t *testing.T) {
	gpus := []model.GPU{{Index: 0, Model: "H100", Memory: 80 * model.GiB}, {Index: 1, Model: "H100", Memory: 80 * model.GiB}}
	started := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	p := New("box", gpus, 32, 256*model.GiB, started)
	ctx := context.Background()

	offers, err := p.Offers(ctx)
	if err != nil || len(offers) != 1 {
		t.Fatalf("offers = %v, %v; want one", offers, err)
	}
	o := offers[0]
	if o.GPU != "H100" || o.GPUCount != 2 || o.GPUMemory != 80*model.GiB || o.CapacityType != model.Owned || o.Region != Region {
		t.Fatalf("offer = %+v", o)
	}
	inv, err := p.List(ctx)
	if err != nil || len(inv) != 1 || inv[0].ID != "box" || inv[0].Offer != o || !inv[0].LaunchedAt.Equal(started) {
		t.Fatalf("inventory = %+v, %v; want this machine with its offer", inv, err)
	}
	if _, err := p.Launch(ctx, provider.LaunchRequest{Offer: o}); !errors.Is(err, provider.ErrFixedCapacity) {
		t.Fatalf("Launch error = %v, want ErrFixedCapacity", err)
	}
	if err := p.Terminate(ctx, "box"); !errors.Is(err, provider.ErrFixedCapacity) {
		t.Fatalf("Terminate error = %v, want ErrFixedCapacity", err)
	}
}

func TestCPUOnlyMachineOffersNoGPUs(t *testing.T) {
	p := New("cpu", nil, 4, 8*model.GiB, time.Time{})
	offers, err := p.Offers(context.Background())
	if err != nil || len(offers) != 0 {
		t.Fatalf("offers = %v, %v; want none", offers, err)
	}
	inv, _ := p.List(context.Background())
	if len(inv) != 1 || inv[0].Offer.GPUCount != 0 {
		t.Fatalf("inventory = %+v; the machine itself is still listed", inv)
	}
}
