package sim

import (
	"errors"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/providertest"
)

// TestPoolView: a pool's view of the simulation sells only its clouds'
// offers (another cloud's is ErrUnknownOffer) and passes the conformance
// suite as a driver of its own; a pool without clouds sees every offer.
func TestPoolView(t *testing.T) {
	offers := []model.Offer{
		{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, CapacityType: model.OnDemand, PricePerHour: 98.32},
		{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, CapacityType: model.Spot, PricePerHour: 40, InterruptionRate: 0.01},
		{Provider: "gcp", Region: "us-central1", InstanceType: "a3-highgpu-8g", GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, CapacityType: model.OnDemand, PricePerHour: 88},
	}
	p, clk := newSim(t, Config{Offers: offers, Seed: 7, TimeScale: 10, Scenario: &Scenario{
		Clouds: map[string]CloudSpec{"aws": {Quota: map[string]int{"H100": 8 * 6}}},
		Offers: []OfferRule{{Match: Match{Cloud: "aws"}, Capacity: ptr(10)}, {Match: exact(offers[0]), Capacity: ptr(5)}},
	}})
	all, err := p.ForPool(&model.NodePool{Name: "any", Spec: model.NodePoolSpec{Provider: "sim"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := all.Offers(ctx); len(got) != 3 {
		t.Errorf("a pool without clouds sees %d offers, want 3", len(got))
	}
	v, err := p.ForPool(&model.NodePool{Name: "aws", Spec: model.NodePoolSpec{Provider: "sim", Sim: &model.SimPoolSettings{Clouds: []string{"aws"}}}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := v.Offers(ctx)
	for _, o := range got {
		if o.Provider != "aws" {
			t.Errorf("the aws pool's view sells %s/%s", o.Provider, o.InstanceType)
		}
	}
	if _, err := v.Launch(ctx, provider.LaunchRequest{Offer: offers[2], Token: "gcp-1"}); !errors.Is(err, provider.ErrUnknownOffer) {
		t.Errorf("launching gcp through the aws pool: %v, want ErrUnknownOffer", err)
	}
	providertest.Run(t, v, providertest.Options{
		Offer:    &offers[0],
		Capacity: &providertest.Limit{Offer: offers[0], N: 5},
		Quota:    &providertest.Limit{Offer: offers[1], N: 6},
		Advance:  clk.Advance,
		Boot:     15 * time.Second,
	})
}
