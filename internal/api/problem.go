package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Problem is an RFC 9457 problem document, with every invalid field listed.
type Problem struct {
	Type     string             `json:"type,omitempty"`
	Title    string             `json:"title"`
	Status   int                `json:"status"`
	Detail   string             `json:"detail,omitempty"`
	Instance string             `json:"instance,omitempty"`
	Errors   []model.FieldError `json:"errors,omitempty"`
}

func (p *Problem) Error() string {
	msg := p.Title
	if p.Detail != "" {
		msg += ": " + p.Detail
	}
	for _, e := range p.Errors {
		msg += "\n  " + e.Error()
	}
	return msg
}

// ProblemContentType is the media type of error responses.
const ProblemContentType = "application/problem+json"

func writeProblem(w http.ResponseWriter, r *http.Request, status int, detail string, fields model.FieldErrors) {
	p := Problem{Title: http.StatusText(status), Status: status, Detail: detail, Instance: r.URL.Path}
	if len(fields) > 0 {
		p.Errors = fields.Err().(model.FieldErrors)
	}
	w.Header().Set("Content-Type", ProblemContentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// statusOf maps a controller error to an HTTP status.
func statusOf(err error) int {
	var fe model.FieldErrors
	switch {
	case errors.As(err, &fe):
		return http.StatusBadRequest
	case errors.Is(err, errNotFound):
		return http.StatusNotFound
	case errors.Is(err, errConflict):
		return http.StatusConflict
	case errors.Is(err, model.ErrBudget):
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}
