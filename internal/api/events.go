package api

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// EventList is the body of GET /v1/events.
type EventList struct {
	Events []model.Event `json:"events"`
}

// listEvents serves GET /v1/events: the most recent matching events, oldest
// first. after=SEQ returns only newer ones, so a client follows by passing
// the last seq it saw.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var f model.EventFilter
	var problems model.FieldErrors
	for _, k := range strings.Split(q.Get("kind"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			f.Kinds = append(f.Kinds, model.EventKind(k))
		}
	}
	f.Object, f.Job, f.Node = q.Get("object"), q.Get("job"), q.Get("node")
	if v := q.Get("since"); v != "" {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			f.Since = t
		} else if d, err := time.ParseDuration(v); err == nil && d > 0 {
			f.Since = time.Now().Add(-d)
		} else {
			problems.Add("query.since", "must be an RFC 3339 time or a duration such as 1h")
		}
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			problems.Add("query.after", "must be a non-negative integer")
		}
		f.After = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			problems.Add("query.limit", fmt.Sprintf("must be a positive integer, not %q", v))
		}
		f.Limit = n
	}
	if len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "", problems)
		return
	}
	evs := s.cfg.Controller.Events(f)
	if visible := s.visibleProjects(r, MinRole[PermNodesRead]); visible != nil {
		// A job's events belong to its project; node and instance events
		// are the fleet's, which every viewer may read.
		evs = slices.DeleteFunc(evs, func(e model.Event) bool { return !s.jobVisible(e.Job, visible) })
	}
	writeJSON(w, http.StatusOK, EventList{Events: nonNil(evs)})
}

// jobVisible reports whether a job ("" for none) is in a visible project.
func (s *Server) jobVisible(job string, visible map[string]bool) bool {
	if job == "" {
		return true
	}
	p, ok := s.cfg.Controller.JobProject(job)
	return ok && visible[p]
}

// interruptNode serves POST /v1/nodes/{id}/interrupt.
func (s *Server) interruptNode(w http.ResponseWriter, r *http.Request) {
	nt, err := s.cfg.Controller.InterruptNode(r.Context(), r.PathValue("id"))
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusAccepted, nt)
}
