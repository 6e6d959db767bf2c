package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/archive"
	"github.com/gpufleet/gpufleet/internal/auth"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// maxSyncWait caps an agent's long poll, so that a dead connection is
// noticed and a server shutting down is not held up for long.
const maxSyncWait = 30 * time.Second

// decodeAgent reads an agent protocol message. Unlike manifests these are
// decoded leniently: a newer agent may send fields this server does not
// know, and the protocol version, not the field set, decides compatibility.
func decodeAgent(w http.ResponseWriter, r *http.Request, v any) bool {
	body, ok := readBody(w, r)
	if !ok {
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		// Say which field is at fault, as for every other 400.
		fe := manifest.LenientProblems(body, v)
		if len(fe) == 0 {
			fe = model.FieldErrors{{Path: "body", Message: err.Error()}}
		}
		writeProblem(w, r, http.StatusBadRequest, "the agent message is invalid", fe)
		return false
	}
	return true
}

// sameNode enforces scopeOwnNode: an agent token speaks only for the node
// that is its subject. It answers 403 itself when nodeID is another node.
func sameNode(w http.ResponseWriter, r *http.Request, nodeID string) bool {
	tok := caller(r)
	if tok == nil || tok.Kind != model.TokenAgent || nodeID != tok.Subject {
		writeProblem(w, r, http.StatusForbidden, fmt.Sprintf("this agent token is for node %q, not %q: use the token created for this node (gpufleet tokens create NODE --kind agent), or remove node-id from the agent's data dir", tokSubject(tok), nodeID), nil)
		return false
	}
	return true
}

func tokSubject(t *model.Token) string {
	if t == nil {
		return ""
	}
	return t.Subject
}

// agentJoin exchanges the bearer join token for the node's agent token.
func (s *Server) agentJoin(w http.ResponseWriter, r *http.Request) {
	var req agentapi.JoinRequest
	if !decodeAgent(w, r, &req) {
		return
	}
	if s.cfg.Joiner == nil {
		writeProblem(w, r, http.StatusNotImplemented, "this server launches no instances that join", nil)
		return
	}
	secret, _ := auth.Bearer(r.Header.Get("Authorization"))
	resp, err := s.cfg.Joiner.Join(r.Context(), secret, req.InstanceID)
	switch {
	case errors.Is(err, agentapi.ErrJoinRefused):
		writeProblem(w, r, http.StatusForbidden, err.Error(), nil)
	case err != nil:
		writeProblem(w, r, statusOf(err), err.Error(), fieldErrors(err))
	default:
		writeJSON(w, http.StatusOK, resp)
	}
}

// agentRegister registers the token's node. An agent that sends no node id
// (its first start) is given the token's subject.
func (s *Server) agentRegister(w http.ResponseWriter, r *http.Request) {
	var reg agentapi.Registration
	if !decodeAgent(w, r, &reg) {
		return
	}
	if reg.NodeID == "" {
		reg.NodeID = caller(r).Subject
	}
	if !sameNode(w, r, reg.NodeID) {
		return
	}
	resp, err := s.cfg.Controller.Register(r.Context(), reg)
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), fieldErrors(err))
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// agentSync is the agent's long poll; 404 tells it to register again.
func (s *Server) agentSync(w http.ResponseWriter, r *http.Request) {
	var req agentapi.SyncRequest
	if !decodeAgent(w, r, &req) {
		return
	}
	if !sameNode(w, r, req.NodeID) {
		return
	}
	req.Wait = model.Duration(min(max(req.Wait.D(), 0), maxSyncWait))
	resp, err := s.cfg.Controller.Sync(r.Context(), req)
	if err != nil {
		if r.Context().Err() != nil {
			return // the agent hung up; nobody reads an answer
		}
		status := statusOf(err)
		if errors.Is(err, agentapi.ErrUnknownNode) {
			status = http.StatusNotFound
		}
		writeProblem(w, r, status, err.Error(), fieldErrors(err))
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) agentLogs(w http.ResponseWriter, r *http.Request) {
	var chunk agentapi.LogChunk
	if !decodeAgent(w, r, &chunk) {
		return
	}
	if !sameNode(w, r, chunk.NodeID) {
		return
	}
	ack, err := s.cfg.Controller.AppendLog(r.Context(), chunk)
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), fieldErrors(err))
		return
	}
	writeJSON(w, http.StatusOK, ack)
}

// fieldErrors returns err's field errors, if it is made of them.
func fieldErrors(err error) model.FieldErrors {
	var fe model.FieldErrors
	if errors.As(err, &fe) {
		return fe
	}
	return nil
}

// MaxArchiveBytes bounds an uploaded working directory, compressed; the
// archive's own limits bound it unpacked.
const MaxArchiveBytes = 256 << 20

// ArchiveUploaded answers an upload.
type ArchiveUploaded struct {
	// Digest is the content address to put in spec.run.archive.
	Digest string `json:"digest"`
	// Project is the project whose jobs may name it.
	Project string `json:"project"`
}

func (s *Server) uploadArchive(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Archives == nil {
		writeProblem(w, r, http.StatusNotImplemented, "this server does not store uploaded workdirs", nil)
		return
	}
	// An upload is for one project, like a job: the caller must be a
	// member there, and only that project's jobs may name the archive.
	project := r.URL.Query().Get("project")
	if project == "" {
		project = model.DefaultProject
	}
	if !model.ValidName(project) {
		writeProblem(w, r, http.StatusBadRequest, "", model.FieldErrors{{Path: "query.project", Message: "must be a project name: 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit"}})
		return
	}
	if !s.allowProject(w, r, project) {
		return
	}
	want := r.URL.Query().Get("digest")
	if want != "" {
		if _, err := archive.ParseDigest(want); err != nil {
			writeProblem(w, r, http.StatusBadRequest, "", model.FieldErrors{{Path: "query.digest", Message: err.Error()}})
			return
		}
	}
	digest, err := s.cfg.Archives.Put(r.Body, want)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeProblem(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the archive is larger than %d bytes: leave data sets out of the workdir and read them from shared storage", tooBig.Limit), nil)
		return
	case errors.Is(err, archive.ErrDigestMismatch):
		writeProblem(w, r, http.StatusBadRequest, "", model.FieldErrors{{Path: "query.digest", Message: err.Error() + "; upload it again"}})
		return
	case err != nil:
		writeProblem(w, r, http.StatusInternalServerError, err.Error(), nil)
		return
	}
	if err := s.cfg.Archives.Grant(project, digest); err != nil {
		writeProblem(w, r, http.StatusInternalServerError, err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusCreated, ArchiveUploaded{Digest: digest, Project: project})
}

func (s *Server) downloadArchive(w http.ResponseWriter, r *http.Request) {
	digest := r.PathValue("digest")
	if _, err := archive.ParseDigest(digest); err != nil {
		writeProblem(w, r, http.StatusBadRequest, "", model.FieldErrors{{Path: "path.digest", Message: err.Error()}})
		return
	}
	// An agent token reads only the archives of jobs with a replica
	// desired on its node; others are 404, not 403, so that a token
	// cannot tell which digests exist.
	rc, err := s.cfg.Controller.FetchArchiveFor(r.Context(), caller(r).Subject, digest)
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/gzip")
	if _, err := io.Copy(w, rc); err != nil {
		s.cfg.Log.Warn("sending archive", "archive", digest, "err", err)
	}
}
