package api_test

import (
	"context"
	"net/http"
	"strings"
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
	// Pages: offset skips, total counts every match, the rack included.
	second := decodeReply[api.OfferList](t, get("/v1/offers?gpu=H100&gpus=8&limit=2&offset=1"), http.StatusOK)
	if len(second.Offers) != 2 || second.Offers[0] != list.Offers[1] || second.Total != list.Total || list.Total < 3 {
		t.Errorf("offset=1 page = %+v (total %d), want it to start at the first page's second offer, total %d > 2", second.Offers, second.Total, list.Total)
	}
	if r := get("/v1/offers?offset=-1"); r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "query.offset") {
		t.Errorf("offset=-1 answered %d %s, want 400 naming query.offset", r.Status, r.Body)
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
