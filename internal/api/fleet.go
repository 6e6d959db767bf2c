package api

import (
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/fleet"
	"github.com/gpufleet/gpufleet/internal/gitops"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// FleetRequest is the body of POST /v1/plan and /v1/apply: every document
// of the desired fleet (kinds NodePool, Queue and Project). Documents left
// out are deleted by an apply.
type FleetRequest struct {
	Documents []json.RawMessage `json:"documents"`
	// Message describes an apply, like a commit message.
	Message string `json:"message,omitempty"`
	// BaseRevision, when set, makes an apply fail with 409 unless the
	// fleet is still at that revision (the one the plan showed).
	BaseRevision int `json:"baseRevision,omitempty"`
}

// RollbackRequest is the body of POST /v1/rollback.
type RollbackRequest struct {
	To      int    `json:"to"`
	Message string `json:"message,omitempty"`
}

// PlanView is what POST /v1/plan answers: the changes against the current
// revision (BaseRevision, 0 before the first apply) with costs.
type PlanView struct {
	BaseRevision int `json:"baseRevision"`
	fleet.Result
}

// ApplyView is what an apply or rollback answers.
type ApplyView struct {
	// Revision is the new revision (without its documents), or the current
	// one when Changed is false.
	Revision *model.Revision `json:"revision,omitempty"`
	Changed  bool            `json:"changed"`
	fleet.Result
}

// RevisionList is GET /v1/revisions: every revision, oldest first,
// without documents.
type RevisionList struct {
	Current   int              `json:"current"`
	Revisions []model.Revision `json:"revisions"`
}

// DriftReport is GET /v1/drift.
type DriftReport struct {
	Revision int             `json:"revision"`
	Findings []fleet.Finding `json:"findings"`
	// GitOps, when the server follows a repository, is how the fleet
	// compares with the repository's head (docs/gitops.md).
	GitOps *gitops.Status `json:"gitops,omitempty"`
}

// decodeBody decodes a JSON or YAML body strictly into v.
func decodeBody(r *http.Request, body []byte, v any) model.FieldErrors {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); strings.Contains(mt, "yaml") {
		return manifest.DecodeYAML(body, v)
	}
	return manifest.DecodeJSON(body, v)
}

// desiredFleet reads and validates a FleetRequest; it answers the problem
// itself and returns ok false when there is one.
func (s *Server) desiredFleet(w http.ResponseWriter, r *http.Request) (FleetRequest, *manifest.Set, bool) {
	body, ok := readBody(w, r)
	if !ok {
		return FleetRequest{}, nil, false
	}
	var req FleetRequest
	problems := decodeBody(r, body, &req)
	var set *manifest.Set
	if len(problems) == 0 {
		docs, err := json.Marshal(nonNil(req.Documents))
		if err != nil {
			problems.Add("documents", "not valid JSON")
		} else {
			set, problems = manifest.Parse([]manifest.Source{{Name: "documents", Data: docs, Format: manifest.JSON}},
				manifest.Checks{KnownGPU: s.cfg.Catalog.KnownGPU, Pool: s.cfg.CheckPool})
		}
	}
	if len(req.Message) > 1000 {
		problems.Add("message", "must be at most 1000 characters")
	}
	if req.BaseRevision < 0 {
		problems.Add("baseRevision", "must not be negative")
	}
	if len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "the fleet is invalid; fix the fields below", problems)
		return FleetRequest{}, nil, false
	}
	s.canonicalGPUs(set)
	return req, set, true
}

// canonicalGPUs rewrites GPU model names as the catalog spells them, so a
// plan does not show "h100" → "H100" as a change.
func (s *Server) canonicalGPUs(set *manifest.Set) {
	canon := func(name string) string {
		if c, ok := s.cfg.Catalog.CanonicalGPU(name); ok {
			return c
		}
		return name
	}
	for i := range set.Queues {
		q := &set.Queues[i].Spec
		for k, v := range q.Quota {
			if c := canon(k); c != k && k != model.AnyGPU {
				delete(q.Quota, k)
				q.Quota[c] = v
			}
		}
	}
	for i := range set.NodePools {
		req := &set.NodePools[i].Spec.Requirements
		for j, g := range req.GPUModels {
			req.GPUModels[j] = canon(g)
		}
	}
	for i := range set.Projects {
		p := &set.Projects[i].Spec
		for k, v := range p.Quota {
			if c := canon(k); c != k && k != model.AnyGPU {
				delete(p.Quota, k)
				p.Quota[c] = v
			}
		}
		for j, g := range p.AllowedGPUs {
			p.AllowedGPUs[j] = canon(g)
		}
	}
}

func revNumber(r *model.Revision) int {
	if r == nil {
		return 0
	}
	return r.Number
}

func (s *Server) plan(w http.ResponseWriter, r *http.Request) {
	_, set, ok := s.desiredFleet(w, r)
	if !ok {
		return
	}
	cur, curSet := s.cfg.Controller.PlanBase(set)
	writeJSON(w, http.StatusOK, PlanView{BaseRevision: revNumber(cur), Result: fleet.Plan(curSet, set, fleet.Pricing{Offers: s.cfg.Catalog, Pool: s.cfg.PoolPrice})})
}

func (s *Server) apply(w http.ResponseWriter, r *http.Request) {
	req, set, ok := s.desiredFleet(w, r)
	if !ok {
		return
	}
	s.applySet(w, r, set, model.ApplyOptions{Author: caller(r).Subject, Message: req.Message, BaseRevision: req.BaseRevision}, 0)
}

// applySet plans set against the current revision, applies it and answers
// with the revision and the changes it made.
func (s *Server) applySet(w http.ResponseWriter, r *http.Request, set *manifest.Set, opts model.ApplyOptions, rollbackTo int) {
	_, curSet := s.cfg.Controller.PlanBase(set)
	plan := fleet.Plan(curSet, set, fleet.Pricing{Offers: s.cfg.Catalog, Pool: s.cfg.PoolPrice})
	var (
		res model.ApplyResult
		err error
	)
	if rollbackTo > 0 {
		res, err = s.cfg.Controller.Rollback(r.Context(), rollbackTo, opts)
	} else {
		res, err = s.cfg.Controller.ApplyFleet(r.Context(), set, opts)
	}
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	view := ApplyView{Changed: res.Changed, Result: plan}
	if res.Revision != nil {
		rev := *res.Revision
		rev.Documents = nil
		view.Revision = &rev
	}
	if !res.Changed {
		view.Changes = []fleet.Change{}
		writeJSON(w, http.StatusOK, view)
		return
	}
	writeJSON(w, http.StatusCreated, view)
}

func (s *Server) rollback(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var req RollbackRequest
	problems := decodeBody(r, body, &req)
	if len(problems) == 0 && req.To < 1 {
		problems.Add("to", "must be a revision number (see gpufleet history)")
	}
	if len(req.Message) > 1000 {
		problems.Add("message", "must be at most 1000 characters")
	}
	if len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "the rollback is invalid; fix the fields below", problems)
		return
	}
	rev, err := s.cfg.Controller.Revision(req.To)
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	set, err := manifest.ParseStored(rev.Documents)
	if err != nil {
		writeProblem(w, r, http.StatusInternalServerError, err.Error(), nil)
		return
	}
	s.applySet(w, r, set, model.ApplyOptions{Author: caller(r).Subject, Message: req.Message}, req.To)
}

func (s *Server) listRevisions(w http.ResponseWriter, _ *http.Request) {
	cur, _ := s.cfg.Controller.Declared()
	writeJSON(w, http.StatusOK, RevisionList{Current: revNumber(cur), Revisions: nonNil(s.cfg.Controller.Revisions())})
}

func (s *Server) getRevision(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.PathValue("number"))
	if err != nil {
		writeProblem(w, r, http.StatusBadRequest, "", model.FieldErrors{{Path: "path.number", Message: "must be a revision number"}})
		return
	}
	rev, err := s.cfg.Controller.Revision(n)
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, rev)
}

func (s *Server) drift(w http.ResponseWriter, r *http.Request) {
	findings, err := s.cfg.Controller.Drift(r.Context())
	if err != nil {
		writeProblem(w, r, http.StatusBadGateway, err.Error(), nil)
		return
	}
	cur, _ := s.cfg.Controller.Declared()
	rep := DriftReport{Revision: revNumber(cur), Findings: findings}
	if s.cfg.GitOps != nil {
		st := s.cfg.GitOps.Status()
		rep.GitOps = &st
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) gitopsStatus(w http.ResponseWriter, r *http.Request) {
	if s.cfg.GitOps == nil {
		writeProblem(w, r, http.StatusNotFound, "this server follows no git repository: start it with --gitops-repo (docs/gitops.md)", nil)
		return
	}
	writeJSON(w, http.StatusOK, s.cfg.GitOps.Status())
}
