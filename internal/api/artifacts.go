package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Permissions of artefacts (docs/artifacts.md): as for jobs, viewers read,
// members push, project admins delete.
const (
	PermArtifactsRead   Permission = "artifacts.read"
	PermArtifactsPush   Permission = "artifacts.push"
	PermArtifactsDelete Permission = "artifacts.delete"
)

// MaxArtifactFileBytes bounds one file of a push.
const MaxArtifactFileBytes = 1 << 40

// Artifacts is the artefact catalogue (package artifacts). Lookups of a
// missing artefact fail with model.ErrNotFound, stored bytes that fail
// verification with model.ErrCorrupt.
type Artifacts interface {
	List(ctx context.Context, project string, f model.ArtifactFilter) ([]model.Artifact, error)
	Get(ctx context.Context, project string, r model.ArtifactRef) (model.Artifact, error)
	Open(ctx context.Context, project string, r model.ArtifactRef, path string) (model.Artifact, model.ArtifactFile, io.ReadCloser, error)
	PutObject(ctx context.Context, project, name, sum string, size int64, r io.Reader) error
	Commit(ctx context.Context, project, name string, p model.ArtifactPush) (*model.Artifact, []string, error)
	Delete(ctx context.Context, project string, r model.ArtifactRef, all bool) (int, error)
}

// PushResult answers POST /v1/artifacts/{project}/models/{name}: the new
// version, or (status 200, nothing created) the SHA-256s of the files the
// server still needs.
type PushResult struct {
	Artifact *model.Artifact `json:"artifact,omitempty"`
	Missing  []string        `json:"missing,omitempty"`
}

// DeleteResult answers a DELETE of artefacts.
type DeleteResult struct {
	Deleted int `json:"deleted"`
}

// ArtifactErrorTrailer carries an error found after a file's first bytes
// were sent (a corrupt chunk further on): the body is then not the file.
const ArtifactErrorTrailer = "Gpufleet-Error"

func artifactRoutes() []Route {
	versionQ := []Param{{"version", "string", "checkpoint: latest (default) or a step; model: latest (default), a version or @TAG"}}
	fileQ := append([]Param{{"path", "string", "the file's path in the artefact"}}, versionQ...)
	return []Route{
		{Method: "GET", Pattern: "/v1/artifacts", Project: projectOfQuery, Perm: PermArtifactsRead, Kinds: users,
			Summary: "List a project's checkpoints and pushed artefacts (model files), newest first.",
			Query: []Param{{"project", "string", "project name (required)"}, {"job", "string", "only this job's checkpoints and artefacts"},
				{"name", "string", "only this pushed artefact"}, {"kind", "string", "checkpoint or model"}},
			Response: model.ArtifactList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listArtifacts }},
		{Method: "GET", Pattern: "/v1/artifacts/{project}/checkpoints/{job}", Project: projectOfPath, Perm: PermArtifactsRead, Kinds: users,
			Summary: "One checkpoint of a job with its files (SHA-256 each).", Query: versionQ, Response: model.Artifact{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.getArtifact }},
		{Method: "GET", Pattern: "/v1/artifacts/{project}/checkpoints/{job}/file", Project: projectOfPath, Perm: PermArtifactsRead, Kinds: users,
			Summary: "A file of a checkpoint, verified as it is read (an error after the first bytes comes in the Gpufleet-Error trailer).",
			Query:   fileQ, ResponseType: "application/octet-stream", Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.artifactFile }},
		{Method: "DELETE", Pattern: "/v1/artifacts/{project}/checkpoints/{job}/steps/{step}", Project: projectOfPath, Perm: PermArtifactsDelete, Kinds: users,
			Summary:  "Delete a job's checkpoint of a step (its latest only once the job has ended); its objects are collected later.",
			Response: DeleteResult{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.deleteArtifact }},
		{Method: "GET", Pattern: "/v1/artifacts/{project}/models/{name}", Project: projectOfPath, Perm: PermArtifactsRead, Kinds: users,
			Summary: "One version of a pushed artefact with its files.", Query: versionQ, Response: model.Artifact{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.getArtifact }},
		{Method: "GET", Pattern: "/v1/artifacts/{project}/models/{name}/file", Project: projectOfPath, Perm: PermArtifactsRead, Kinds: users,
			Summary: "A file of a pushed artefact, verified as it is read.", Query: fileQ, ResponseType: "application/octet-stream", Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.artifactFile }},
		{Method: "PUT", Pattern: "/v1/artifacts/{project}/models/{name}/objects/{digest}", Project: projectOfPath, Perm: PermArtifactsPush, Kinds: users,
			MaxBody: MaxArtifactFileBytes,
			Summary: "Send one file's content for a push (the body; Content-Length required); refused when its SHA-256 is not the one named.",
			Status:  204,
			handler: func(s *Server) http.HandlerFunc { return s.putArtifactObject }},
		{Method: "POST", Pattern: "/v1/artifacts/{project}/models/{name}", Project: projectOfPath, Perm: PermArtifactsPush, Kinds: users, MaxBody: 64 << 20,
			Summary: "Push a new version (files by path, size, SHA-256, and tags): 201 with the version, or 200 with the SHA-256s still to send.",
			Request: model.ArtifactPush{}, Response: PushResult{}, Status: 201,
			handler: func(s *Server) http.HandlerFunc { return s.pushArtifact }},
		{Method: "DELETE", Pattern: "/v1/artifacts/{project}/models/{name}", Project: projectOfPath, Perm: PermArtifactsDelete, Kinds: users,
			Summary: "Delete one version (?version=) or, with ?all=true, every version of a pushed artefact.",
			Query:   []Param{{"version", "string", "a version or @TAG"}, {"all", "boolean", "every version"}}, Response: DeleteResult{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.deleteArtifact }},
	}
}

func (s *Server) artifacts(w http.ResponseWriter, r *http.Request) (Artifacts, bool) {
	if s.cfg.Artifacts == nil {
		writeProblem(w, r, http.StatusNotImplemented, "this server keeps no artefacts", nil)
		return nil, false
	}
	return s.cfg.Artifacts, true
}

// artifactStatus maps a catalogue error to a status.
func artifactStatus(err error) int {
	if errors.Is(err, model.ErrCorrupt) {
		return http.StatusBadGateway
	}
	return statusOf(err)
}

func writeArtifactError(w http.ResponseWriter, r *http.Request, err error) {
	var fe model.FieldErrors
	if errors.As(err, &fe) {
		writeProblem(w, r, http.StatusBadRequest, "", fe)
		return
	}
	writeProblem(w, r, artifactStatus(err), err.Error(), nil)
}

func (s *Server) listArtifacts(w http.ResponseWriter, r *http.Request) {
	a, ok := s.artifacts(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	project := q.Get("project")
	if project == "" {
		writeProblem(w, r, http.StatusBadRequest, "", model.FieldErrors{{Path: "query.project", Message: "name the project (gpufleet artifacts list -p PROJECT)"}})
		return
	}
	f := model.ArtifactFilter{Job: q.Get("job"), Name: q.Get("name"), Kind: q.Get("kind")}
	if f.Kind != "" && f.Kind != model.ArtifactCheckpoint && f.Kind != model.ArtifactModel {
		writeProblem(w, r, http.StatusBadRequest, "", model.FieldErrors{{Path: "query.kind", Message: "must be checkpoint or model"}})
		return
	}
	items, err := a.List(r.Context(), project, f)
	if err != nil {
		writeArtifactError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, model.ArtifactList{Items: items})
}

// artifactRef reads the artefact a request names.
func artifactRef(r *http.Request) model.ArtifactRef {
	ref := model.ArtifactRef{Job: r.PathValue("job"), Name: r.PathValue("name"), Version: r.URL.Query().Get("version")}
	if step := r.PathValue("step"); step != "" {
		ref.Version = step
	}
	return ref
}

func (s *Server) getArtifact(w http.ResponseWriter, r *http.Request) {
	a, ok := s.artifacts(w, r)
	if !ok {
		return
	}
	art, err := a.Get(r.Context(), r.PathValue("project"), artifactRef(r))
	if err != nil {
		writeArtifactError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, art)
}

// artifactFile streams a file. Its first chunk is read before the status
// is sent, so a missing or corrupt object at the start is an error
// status; a failure further on ends the body early with the
// Gpufleet-Error trailer (the client also checks the SHA-256 it was given
// in X-Gpufleet-Sha256).
func (s *Server) artifactFile(w http.ResponseWriter, r *http.Request) {
	a, ok := s.artifacts(w, r)
	if !ok {
		return
	}
	_, f, rc, err := a.Open(r.Context(), r.PathValue("project"), artifactRef(r), r.URL.Query().Get("path"))
	if err != nil {
		writeArtifactError(w, r, err)
		return
	}
	defer rc.Close()
	buf := make([]byte, 1<<20)
	n, err := io.ReadFull(rc, buf)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		writeArtifactError(w, r, err)
		return
	}
	complete := err != nil // the whole file fitted in buf, verified
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Gpufleet-Size", strconv.FormatInt(f.Size, 10))
	h.Set("X-Gpufleet-Sha256", f.SHA256)
	h.Set("X-Gpufleet-Mode", strconv.FormatUint(uint64(f.Mode), 8))
	if complete {
		h.Set("Content-Length", strconv.Itoa(n))
	} else {
		h.Set("Trailer", ArtifactErrorTrailer) // chunked, so a failure can be said
	}
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(buf[:n]); err != nil || complete {
		return
	}
	if _, err := io.CopyBuffer(w, rc, buf); err != nil && r.Context().Err() == nil {
		h.Set(ArtifactErrorTrailer, err.Error())
		s.cfg.Log.Error("serving an artefact's file", "path", r.URL.Path, "err", err)
	}
}

func (s *Server) putArtifactObject(w http.ResponseWriter, r *http.Request) {
	a, ok := s.artifacts(w, r)
	if !ok {
		return
	}
	if r.ContentLength < 0 {
		writeProblem(w, r, http.StatusLengthRequired, "send Content-Length", nil)
		return
	}
	if err := a.PutObject(r.Context(), r.PathValue("project"), r.PathValue("name"), r.PathValue("digest"), r.ContentLength, r.Body); err != nil {
		writeArtifactError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) pushArtifact(w http.ResponseWriter, r *http.Request) {
	a, ok := s.artifacts(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var p model.ArtifactPush
	if problems := manifest.DecodeJSON(body, &p); len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "", problems)
		return
	}
	art, missing, err := a.Commit(r.Context(), r.PathValue("project"), r.PathValue("name"), p)
	if err != nil {
		writeArtifactError(w, r, err)
		return
	}
	if art == nil {
		writeJSON(w, http.StatusOK, PushResult{Missing: missing})
		return
	}
	writeJSON(w, http.StatusCreated, PushResult{Artifact: art})
}

func (s *Server) deleteArtifact(w http.ResponseWriter, r *http.Request) {
	a, ok := s.artifacts(w, r)
	if !ok {
		return
	}
	ref := artifactRef(r)
	all := r.URL.Query().Get("all") == "true"
	if ref.Name != "" && !all && ref.Version == "" {
		writeProblem(w, r, http.StatusBadRequest, "", model.FieldErrors{{Path: "query.version", Message: fmt.Sprintf("name the version of %s to delete, or all=true for every version", ref.Name)}})
		return
	}
	n, err := a.Delete(r.Context(), r.PathValue("project"), ref, all)
	if err != nil {
		writeArtifactError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, DeleteResult{Deleted: n})
}
