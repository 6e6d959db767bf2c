package api

import (
	"errors"
	"net/http"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Permissions of job secrets (issue 9).
const (
	// PermSecretsManage writes, lists (names only) and deletes a
	// project's secrets: project admins.
	PermSecretsManage Permission = "secrets.manage"
	// PermSecretsReseal re-seals every secret with the newest key, after a
	// key rotation (admins only).
	PermSecretsReseal Permission = "secrets.reseal"
)

func secretRoutes() []Route {
	return []Route{
		{Method: "GET", Pattern: "/v1/projects/{project}/secrets", Project: projectOfPath, Perm: PermSecretsManage, Kinds: users,
			Summary:  "A project's secrets: names and versions, never values.",
			Response: SecretList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listSecrets }},
		{Method: "PUT", Pattern: "/v1/projects/{project}/secrets/{name}", Project: projectOfPath, Perm: PermSecretsManage, Kinds: users,
			Summary: "Write a secret, sealed at rest; jobs name it in spec.run.secrets and get it as an environment variable. The value is never returned.",
			Request: SecretWrite{}, Response: model.SecretInfo{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.putSecret }},
		{Method: "DELETE", Pattern: "/v1/projects/{project}/secrets/{name}", Project: projectOfPath, Perm: PermSecretsManage, Kinds: users,
			Summary: "Delete a secret; running jobs keep the value they started with.",
			Status:  204,
			handler: func(s *Server) http.HandlerFunc { return s.deleteSecret }},
		{Method: "POST", Pattern: "/v1/secrets/reseal", Perm: PermSecretsReseal, Kinds: users,
			Summary:  "Re-seal every secret with the newest sealing key, so older keys can be removed from the key file.",
			Response: ResealResult{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.resealSecrets }},
	}
}

// SecretList is the body of GET /v1/projects/{project}/secrets.
type SecretList struct {
	Secrets []model.SecretInfo `json:"secrets"`
}

// SecretWrite is the body of PUT /v1/projects/{project}/secrets/{name}.
type SecretWrite struct {
	Value string `json:"value"`
}

// ResealResult is the body of POST /v1/secrets/reseal.
type ResealResult struct {
	Resealed int `json:"resealed"`
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, SecretList{Secrets: s.cfg.Secrets.Secrets(r.PathValue("project"))})
}

func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var sw SecretWrite
	if problems := manifest.DecodeJSON(body, &sw); len(problems) > 0 {
		// Decoding problems never quote the value: they name fields.
		writeProblem(w, r, http.StatusBadRequest, "", problems)
		return
	}
	project := r.PathValue("project")
	if !model.ValidName(project) {
		writeProblem(w, r, http.StatusBadRequest, "", model.FieldErrors{{Path: "path.project", Message: "must be a project name: lower-case letters, digits and dashes (at most 63)"}})
		return
	}
	info, err := s.cfg.Secrets.PutSecret(r.Context(), project, r.PathValue("name"), []byte(sw.Value))
	var fe model.FieldErrors
	if errors.As(err, &fe) {
		writeProblem(w, r, http.StatusBadRequest, "", fe)
		return
	}
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.Secrets.DeleteSecret(r.Context(), r.PathValue("project"), r.PathValue("name")); err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) resealSecrets(w http.ResponseWriter, r *http.Request) {
	n, err := s.cfg.Secrets.ResealSecrets(r.Context())
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, ResealResult{Resealed: n})
}
