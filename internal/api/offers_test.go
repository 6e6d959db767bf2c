package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestOffersIncludeOwnedMachines: GET /v1/offers lists the fleet's owned
// machines at their declared price beside the catalog's offers, through
// the same filters; GET /v1/offers/unavailable answers an empty list on a
// fresh server.
func TestOffersIncludeOwnedMachines(t *testing.T) {
	t.Parallel()
	rack := model.Offer{Provider: "static", Region: "owned", InstanceType: "owned", GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB,
		VCPUs: 96, Memory: 1024 * model.GiB, CapacityType: model.Owned, PricePerHour: 0.8}
	e := newEnv(t, envConfig{Owned: func(context.Context) []model.Offer { return []model.Offer{rack} }})
	get := func(path string) reply { return e.do(t, req{Method: "GET", Path: path, Token: e.admin}) }
	list := decodeReply[api.OfferList](t, get("/v1/offers?gpu=H100&gpus=8&limit=2"), http.StatusOK)
	if len(list.Offers) != 2 || list.Offers[0] != rack || list.Offers[1].Provider == "static" {
		t.Errorf("offers = %+v, want the owned rack first, then the catalog's cheapest", list.Offers)
	}
	spot := decodeReply[api.OfferList](t, get("/v1/offers?gpu=H100&gpus=8&capacity=spot&limit=5"), http.StatusOK)
	for _, o := range spot.Offers {
		if o.Provider == "static" {
			t.Errorf("owned machine among spot offers: %+v", o)
		}
	}
	un := decodeReply[api.UnavailableList](t, get("/v1/offers/unavailable"), http.StatusOK)
	if un.Unavailable == nil || len(un.Unavailable) != 0 {
		t.Errorf("unavailable = %#v, want an empty list", un.Unavailable)
	}
}
