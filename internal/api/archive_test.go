package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/archive"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestArchiveScopedToNode: an agent token downloads only the archive of a
// job with a replica desired on its node. Another node's token, a digest no
// job on the node uses (uploaded or not), and the node's own job once it
// has ended all get 404, never 403, so a token cannot tell which archives
// exist.
func TestArchiveScopedToNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Archives: true})
	upload := func(content string) (string, []byte) {
		t.Helper()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "train.py"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := archive.Pack(dir, &buf, archive.Limits{}); err != nil {
			t.Fatal(err)
		}
		got := e.do(t, req{Method: "POST", Path: "/v1/archives", Token: e.admin, Body: buf.Bytes()})
		if got.Status != http.StatusCreated {
			t.Fatalf("upload = %d %s", got.Status, got.Body)
		}
		d, _, _ := strings.Cut(strings.TrimPrefix(string(got.Body), `{"digest":"`), `"`)
		return d, buf.Bytes()
	}
	used, usedBytes := upload("print('mine')")
	other, _ := upload("print('someone else')")
	never := "sha256:" + strings.Repeat("ab", 32)

	// node-a runs the job that uses the archive; node-b runs nothing.
	ctx := context.Background()
	reg := func(id string, gpus int) {
		r := agentapi.Registration{NodeID: id, Name: id, Provider: "static", CPU: 16, Memory: 64 * model.GiB, Region: "local"}
		for i := range gpus {
			r.GPUs = append(r.GPUs, model.GPU{Index: i, UUID: "GPU-" + id, Model: "H100", Memory: 80 * model.GiB})
		}
		if _, err := e.ctrl.Register(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	reg("node-a", 1)
	reg("node-b", 0)
	_, tokA := e.token(t, model.TokenRequest{Kind: model.TokenAgent, Subject: "node-a"})
	_, tokB := e.token(t, model.TokenRequest{Kind: model.TokenAgent, Subject: "node-b"})
	manifest := bytes.Replace(jobManifest("with-code"), []byte(`"env":`), []byte(`"archive": "`+used+`", "workdir": ".", "env":`), 1)
	jobID := e.submit(t, manifest)
	a := &fakeAgent{ctrl: e.ctrl, node: "node-a"}
	rs := a.waitReplicas(t, 1)
	if rs[0].JobID != jobID || rs[0].Archive != used {
		t.Fatalf("node-a desires %+v, want job %s with archive %s", rs[0], jobID, used)
	}

	get := func(tok, digest string) reply {
		return e.do(t, req{Method: "GET", Path: "/v1/archives/" + digest, Token: tok})
	}
	for name, tt := range map[string]struct {
		tok, digest string
		want        int
	}{
		"own job's archive":            {tokA, used, http.StatusOK},
		"another node's job's archive": {tokB, used, http.StatusNotFound},
		"uploaded, used by no job":     {tokA, other, http.StatusNotFound},
		"never uploaded":               {tokA, never, http.StatusNotFound},
		"user token":                   {e.admin, used, http.StatusForbidden},
	} {
		t.Run(name, func(t *testing.T) {
			got := get(tt.tok, tt.digest)
			if got.Status != tt.want {
				t.Fatalf("status = %d, want %d; body %s", got.Status, tt.want, got.Body)
			}
			if tt.want == http.StatusOK && !bytes.Equal(got.Body, usedBytes) {
				t.Errorf("downloaded %d bytes, not the %d uploaded", len(got.Body), len(usedBytes))
			}
			if tt.want >= 400 {
				p := problem(t, got)
				if tt.want == http.StatusNotFound && (strings.Contains(p.Detail, "never uploaded") || strings.Contains(p.Detail, "uploaded")) {
					t.Errorf("a 404 tells whether the archive exists: %q", p.Detail)
				}
			}
		})
	}

	// Once the job has ended, its node no longer needs the code.
	a.report(t, runningStatus(rs[0].ID), exitedStatus(rs[0].ID, 0))
	e.waitJob(t, jobID, model.JobSucceeded)
	if got := get(tokA, used); got.Status != http.StatusNotFound {
		t.Errorf("after the job ended: status %d, want 404", got.Status)
	}
}

// TestArchivesArePerProject: an upload is for one project (?project=,
// default "default", the caller a member there), and only that project's
// jobs may name the archive in spec.run.archive: a member of project b who
// learned a's digest is refused with a field error, whether or not the
// digest exists, until b uploads the same bytes itself (one blob, two
// grants).
func TestArchivesArePerProject(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Archives: true})
	e.grant(t, "ann", "a", model.RoleMember)
	e.grant(t, "bob", "b", model.RoleMember)
	_, ann := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: "ann"})
	_, bob := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: "bob"})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "train.py"), []byte("print('a')"), 0o600); err != nil {
		t.Fatal(err)
	}
	var packed bytes.Buffer
	if _, err := archive.Pack(dir, &packed, archive.Limits{}); err != nil {
		t.Fatal(err)
	}
	upload := func(token, query string) (int, api.ArchiveUploaded) {
		t.Helper()
		got := e.do(t, req{Method: "POST", Path: "/v1/archives" + query, Token: token, Body: packed.Bytes()})
		var out api.ArchiveUploaded
		if got.Status == http.StatusCreated {
			if err := json.Unmarshal(got.Body, &out); err != nil {
				t.Fatalf("decoding %s: %v", got.Body, err)
			}
		}
		return got.Status, out
	}
	submit := func(token, project, digest string) (int, []string) {
		t.Helper()
		body := []byte(`{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "metadata": {"name": "code", "project": "` + project + `"},
  "spec": {"resources": {"gpus": 1, "gpu": {"models": ["H100"]}}, "run": {"command": ["python", "train.py"], "archive": "` + digest + `", "workdir": "."}}}`)
		got := e.do(t, req{Method: "POST", Path: "/v1/jobs", Token: token, Header: map[string]string{"Content-Type": "application/json"}, Body: body})
		if got.Status == http.StatusCreated {
			return got.Status, nil
		}
		p := problem(t, got)
		for _, fe := range p.Errors {
			if fe.Path == "spec.run.archive" && !strings.Contains(fe.Message, "upload it within that project") {
				t.Errorf("the refusal does not say what to do: %q", fe.Message)
			}
		}
		return got.Status, problemPaths(p)
	}

	status, up := upload(ann, "?project=a")
	if diff := cmp.Diff(api.ArchiveUploaded{Digest: up.Digest, Project: "a"}, up); status != http.StatusCreated || diff != "" {
		t.Fatalf("ann's upload in a: status %d, (-want +got):\n%s", status, diff)
	}
	digest := up.Digest
	never := "sha256:" + strings.Repeat("ab", 32)

	type result struct {
		Status int
		Paths  []string
	}
	check := func(name, token, project, digest string, want result) {
		t.Helper()
		s, paths := submit(token, project, digest)
		if diff := cmp.Diff(want, result{s, paths}); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	refused := result{http.StatusBadRequest, []string{"spec.run.archive"}}
	check("ann's job in a with a's archive", ann, "a", digest, result{Status: http.StatusCreated})
	check("bob's job in b with a's archive", bob, "b", digest, refused)
	check("bob's job in b with a digest never uploaded", bob, "b", never, refused)
	check("an admin's job in b with a's archive", e.admin, "b", digest, refused)

	// Uploads are checked like submissions: a member of b cannot upload
	// for a, nor for the default project without a role there.
	for name, tt := range map[string]struct {
		token, query string
		want         int
	}{
		"bob for a":             {bob, "?project=a", http.StatusForbidden},
		"bob for the default":   {bob, "", http.StatusForbidden},
		"admin for a bad name":  {e.admin, "?project=Bad_Name", http.StatusBadRequest},
		"admin for the default": {e.admin, "", http.StatusCreated},
	} {
		if got, _ := upload(tt.token, tt.query); got != tt.want {
			t.Errorf("%s: status %d, want %d", name, got, tt.want)
		}
	}
	// The same bytes uploaded in b are the same blob, now granted to b too.
	if status, up := upload(bob, "?project=b"); status != http.StatusCreated || up.Digest != digest {
		t.Fatalf("bob's upload of the same bytes in b: status %d, digest %s, want 201 and %s", status, up.Digest, digest)
	}
	check("bob's job in b after uploading in b", bob, "b", digest, result{Status: http.StatusCreated})
	check("ann's job in a still works", ann, "a", digest, result{Status: http.StatusCreated})
}
