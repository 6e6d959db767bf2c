package model

import (
	"sort"
	"strings"
)

// FieldError is one problem with one field of a request, manifest or config.
// Path uses dots and brackets from the document root, as a user wrote it:
// "spec.resources.gpus" or "spec.run.command[0]".
type FieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (e FieldError) Error() string { return e.Path + ": " + e.Message }

// FieldErrors collects every problem found in one document, so a user can fix
// them all at once. A nil or empty FieldErrors means valid.
type FieldErrors []FieldError

// Add appends a problem at path.
func (fe *FieldErrors) Add(path, msg string) { *fe = append(*fe, FieldError{Path: path, Message: msg}) }

// Err returns fe as an error, or nil when there are no problems. Problems
// are sorted by path so messages are stable.
func (fe FieldErrors) Err() error {
	if len(fe) == 0 {
		return nil
	}
	out := append(FieldErrors(nil), fe...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func (fe FieldErrors) Error() string {
	parts := make([]string, len(fe))
	for i, e := range fe {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}
