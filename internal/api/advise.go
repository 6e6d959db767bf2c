package api

import (
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet/internal/advisor"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// advise ranks the catalog's offers for a workload (advisor.Request as JSON
// or YAML). An invalid profile is 400 with every field; a workload that fits
// nowhere is 200 with no rows and the shortfall named. Rates measured by
// `gpufleet bench` (Config.Calibration) replace datasheet rates.
func (s *Server) advise(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var req advisor.Request
	var problems model.FieldErrors
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); strings.Contains(mt, "yaml") {
		problems = manifest.DecodeYAML(body, &req)
	} else {
		problems = manifest.DecodeJSON(body, &req)
	}
	if len(problems) == 0 {
		problems = req.Validate(s.cfg.Catalog.KnownGPU)
	}
	if len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "the advise request is invalid; fix the fields below", problems)
		return
	}
	for i, g := range req.GPUs {
		if c, ok := s.cfg.Catalog.CanonicalGPU(g); ok {
			req.GPUs[i] = c
		}
	}
	// The catalog's offers are ranked in place (Rank only reads them); a
	// fleet's owned machines, when there are any, join a copy.
	offers := s.cfg.Catalog.SharedOffers()
	if owned := s.owned(r.Context()); len(owned) > 0 {
		offers = slices.Concat(offers, owned)
	}
	res, err := advisor.Rank(req.Profile, req.Options(offers, s.cfg.Catalog.Accelerator, s.cfg.Calibration))
	if err != nil {
		// Validate ran first; anything left is still the caller's input.
		writeProblem(w, r, http.StatusBadRequest, err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
