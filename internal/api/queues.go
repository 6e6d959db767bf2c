package api

import (
	"mime"
	"net/http"
	"strings"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// QueueManifest is a queue as a manifest of kind Queue writes it; PUT
// /v1/queues/{name} takes it as JSON or YAML.
type QueueManifest struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   QueueMetadata   `json:"metadata"`
	Spec       model.QueueSpec `json:"spec"`
}

// QueueMetadata names a queue.
type QueueMetadata struct {
	Name string `json:"name"`
}

// QueueView is a queue as the API shows it.
type QueueView = model.QueueStatus

// QueueList is GET /v1/queues.
type QueueList struct {
	Queues []QueueView `json:"queues"`
}

// Explanation is GET /v1/jobs/{id}/explain.
type Explanation = model.Explanation

func (s *Server) listQueues(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, QueueList{Queues: nonNil(s.cfg.Controller.Queues())})
}

func (s *Server) getQueue(w http.ResponseWriter, r *http.Request) {
	q, err := s.cfg.Controller.Queue(r.PathValue("name"))
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, q)
}

func (s *Server) putQueue(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	var m QueueManifest
	var problems model.FieldErrors
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); strings.Contains(mt, "yaml") {
		problems = manifest.DecodeYAML(body, &m)
	} else {
		problems = manifest.DecodeJSON(body, &m)
	}
	if len(problems) == 0 {
		if m.APIVersion != manifest.APIVersion {
			problems.Add("apiVersion", "must be "+manifest.APIVersion)
		}
		if m.Kind != "Queue" {
			problems.Add("kind", "must be Queue")
		}
		switch {
		case m.Metadata.Name == "":
			m.Metadata.Name = name
		case m.Metadata.Name != name:
			problems.Add("metadata.name", "must match the name in the path ("+name+")")
		}
		if !model.ValidName(name) {
			problems.Add("metadata.name", "must be lower-case letters, digits and dashes (at most 63)")
		}
		problems = append(problems, m.Spec.Validate("spec", s.cfg.Catalog.KnownGPU)...)
	}
	if len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "the queue is invalid; fix the fields below", problems)
		return
	}
	for k, v := range m.Spec.Quota {
		if c, ok := s.cfg.Catalog.CanonicalGPU(k); ok && c != k {
			delete(m.Spec.Quota, k)
			m.Spec.Quota[c] = v
		}
	}
	_, created, err := s.cfg.Controller.PutQueue(r.Context(), name, m.Spec)
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	q, err := s.cfg.Controller.Queue(name)
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, q)
}

func (s *Server) deleteQueue(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.Controller.DeleteQueue(r.Context(), r.PathValue("name")); err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) explainJob(w http.ResponseWriter, r *http.Request) {
	e, err := s.cfg.Controller.Explain(r.PathValue("id"))
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, s.redactJobs(r, e))
}
