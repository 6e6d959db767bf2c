package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/s3test"
)

// artifactEnv is a server with artefacts kept in a real versitygw bucket,
// projects a and b declaring it, and a user per role in a (and a viewer
// of b).
type artifactEnv struct {
	*testEnv
	s3  *s3test.Server
	raw string
}

func newArtifactEnv(tb testing.TB) *artifactEnv {
	tb.Helper()
	e := newEnv(tb, envConfig{Artifacts: true})
	srv := s3test.Start(tb)
	raw := srv.CreateBucket(tb, "art")
	if _, err := e.ctrl.Vault().PutSecret(context.Background(), "ops", "S3", []byte(s3test.AccessKey+":"+s3test.SecretKey)); err != nil {
		tb.Fatal(err)
	}
	var docs []string
	for _, p := range []string{"a", "b"} {
		docs = append(docs, `{"apiVersion": "gpufleet.dev/v1", "kind": "Project", "metadata": {"name": "`+p+`"},
		"spec": {"artifacts": {"storage": {"s3": {"bucket": "art", "prefix": "fleet", "endpoint": "`+srv.Endpoint+`", "pathStyle": true, "credentialsRef": "ops/S3"}}}}}`)
	}
	if r := e.do(tb, req{Method: "POST", Path: "/v1/apply", Token: e.admin, Body: fleetBody(tb, "", docs...)}); r.Status != http.StatusCreated {
		tb.Fatalf("applying the projects: %d %s", r.Status, r.Body)
	}
	return &artifactEnv{testEnv: e, s3: srv, raw: raw}
}

// as returns a client holding a fresh token of user, with role in project.
func (e *artifactEnv) as(tb testing.TB, user, project string, role model.Role) *client.Client {
	tb.Helper()
	if role != "" {
		e.grant(tb, user, project, role)
	}
	_, secret := e.token(tb, model.TokenRequest{Kind: model.TokenUser, Subject: user})
	return client.New(e.http.URL, secret, nil)
}

// pushDir pushes the files of dir through the API, as the CLI does.
func pushDir(ctx context.Context, c *client.Client, project, name, dir string, tags ...string) (*model.Artifact, int64, error) {
	p := model.ArtifactPush{Tags: tags}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	for _, en := range entries {
		b, err := os.ReadFile(filepath.Join(dir, en.Name()))
		if err != nil {
			return nil, 0, err
		}
		sum := sha256.Sum256(b)
		p.Files = append(p.Files, model.ArtifactFile{Path: en.Name(), Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:]), Mode: 0o644})
	}
	return c.PushArtifact(ctx, project, name, p, func(f model.ArtifactFile) (io.ReadCloser, error) {
		return os.Open(filepath.Join(dir, f.Path))
	})
}

// TestArtifactsThroughTheAPI: push, list and get round trip over HTTP with
// every byte verified; a tampered object is named; roles decide who reads,
// pushes and deletes, and another project's viewer sees nothing; pushes and
// deletes are audited.
func TestArtifactsThroughTheAPI(t *testing.T) {
	t.Parallel()
	e := newArtifactEnv(t)
	ctx := context.Background()
	member := e.as(t, "alice", "a", model.RoleMember)
	viewer := e.as(t, "vic", "a", model.RoleViewer)
	padmin := e.as(t, "pat", "a", model.RoleProjectAdmin)
	outsider := e.as(t, "bob", "b", model.RoleViewer)

	dir := t.TempDir()
	weights := make([]byte, 3<<20+5)
	rand.Read(weights)
	os.WriteFile(filepath.Join(dir, "weights.bin"), weights, 0o644)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"layers": 12}`), 0o644)
	if _, _, err := pushDir(ctx, viewer, "a", "bert", dir); client.StatusOf(err) != http.StatusForbidden {
		t.Errorf("a viewer pushing: %v, want 403", err)
	}
	v1, sent, err := pushDir(ctx, member, "a", "bert", dir, "release")
	if err != nil {
		t.Fatal(err)
	}
	if sent != int64(len(weights))+14 {
		t.Errorf("first push sent %d bytes, want every byte (%d)", sent, len(weights)+14)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"layers": 24}`), 0o644)
	v2, sent, err := pushDir(ctx, member, "a", "bert", dir)
	if err != nil {
		t.Fatal(err)
	}
	if sent != 14 {
		t.Errorf("second push sent %d bytes, want only the changed file's 14", sent)
	}

	items, err := viewer.Artifacts(ctx, "a", model.ArtifactFilter{Name: "bert"})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0].Version != v2.Version || !items[0].Latest || items[1].Version != v1.Version || strings.Join(items[1].Tags, ",") != "release" {
		t.Fatalf("viewer lists %+v", items)
	}
	// The list body is {"items": [...]}.
	if r := e.do(t, req{Method: "GET", Path: "/v1/artifacts?project=a", Token: e.admin}); r.Status != 200 || !bytes.HasPrefix(bytes.TrimSpace(r.Body), []byte(`{"items":[`)) {
		t.Errorf("GET /v1/artifacts: %d %s", r.Status, r.Body)
	}
	ref := model.ArtifactRef{Name: "bert", Version: "@release"}
	a, err := viewer.Artifact(ctx, "a", ref)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	for _, f := range a.Files {
		var buf bytes.Buffer
		if err := viewer.ArtifactFile(ctx, "a", ref, f, &buf); err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		got[f.Path] = buf.Bytes()
	}
	if !bytes.Equal(got["weights.bin"], weights) || string(got["config.json"]) != `{"layers": 12}` {
		t.Errorf("release version came back different: %d bytes of weights, config %q", len(got["weights.bin"]), got["config.json"])
	}

	// Another project's viewer: refused on a's artefacts, and a's name
	// means nothing in b.
	if _, err := outsider.Artifacts(ctx, "a", model.ArtifactFilter{}); client.StatusOf(err) != http.StatusForbidden {
		t.Errorf("b's viewer listing a: %v, want 403", err)
	}
	if _, err := outsider.Artifact(ctx, "a", ref); client.StatusOf(err) != http.StatusForbidden {
		t.Errorf("b's viewer reading a's artefact: %v, want 403", err)
	}
	if _, err := outsider.Artifact(ctx, "b", ref); client.StatusOf(err) != http.StatusNotFound {
		t.Errorf("b's viewer reading bert in b: %v, want 404", err)
	}

	// Tamper with the weights on the server's disk: the read fails,
	// naming the object and the file.
	var obj string
	filepath.WalkDir(e.raw, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.Contains(p, "/o/") {
			if fi, _ := d.Info(); fi.Size() > 3<<20 {
				obj = p
			}
		}
		return nil
	})
	b, _ := os.ReadFile(obj)
	b[len(b)-100] ^= 0x40 // in the last chunk: after the first bytes were sent
	os.WriteFile(obj, b, 0o600)
	for _, f := range a.Files {
		if f.Path != "weights.bin" {
			continue
		}
		err := viewer.ArtifactFile(ctx, "a", ref, f, io.Discard)
		if !errors.Is(err, client.ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(obj)) || !strings.Contains(err.Error(), "weights.bin") {
			t.Errorf("reading the tampered file: %v; want a verification error naming object %s and the file", err, filepath.Base(obj))
		}
	}

	// Deletes: project admins only.
	if _, err := member.DeleteArtifact(ctx, "a", model.ArtifactRef{Name: "bert", Version: v2.Version}, false); client.StatusOf(err) != http.StatusForbidden {
		t.Errorf("a member deleting: %v, want 403", err)
	}
	if n, err := padmin.DeleteArtifact(ctx, "a", model.ArtifactRef{Name: "bert", Version: v2.Version}, false); err != nil || n != 1 {
		t.Errorf("project admin deleting: %d, %v", n, err)
	}
	r := e.do(t, req{Method: "GET", Path: "/v1/audit?limit=1000", Token: e.admin})
	var audit struct {
		Entries []model.AuditEntry `json:"entries"`
	}
	json.Unmarshal(r.Body, &audit)
	var actions []string
	for _, en := range audit.Entries {
		if strings.Contains(en.Action, "artifacts") && en.Result < 300 {
			actions = append(actions, en.Actor+" "+en.Action+" "+strconv.Itoa(en.Result))
		}
	}
	for _, want := range []string{
		"user:alice POST /v1/artifacts/{project}/models/{name} 201",
		"user:alice PUT /v1/artifacts/{project}/models/{name}/objects/{digest} 204",
		"user:pat DELETE /v1/artifacts/{project}/models/{name} 200",
	} {
		found := false
		for _, a := range actions {
			found = found || a == want
		}
		if !found {
			t.Errorf("no audit entry %q among %q (%s)", want, actions, r.Body[:min(len(r.Body), 200)])
		}
	}
}

// BenchmarkArtifactsHTTP moves one file of GPUFLEET_BENCH_MB MiB (default
// 64) through the API as the CLI does (push: hash, send, server seals and
// stores; get: server opens and verifies, client verifies), against the
// plain SDK PutObject/GetObject of the same bytes on the same versitygw.
// Run: GPUFLEET_BENCH_MB=1024 go test -run '^$' -bench ArtifactsHTTP -benchtime 1x ./internal/api/
func BenchmarkArtifactsHTTP(b *testing.B) {
	mb := 64
	if v, err := strconv.Atoi(os.Getenv("GPUFLEET_BENCH_MB")); err == nil && v > 0 {
		mb = v
	}
	size := int64(mb) << 20
	e := newArtifactEnv(b)
	ctx := context.Background()
	c := client.New(e.http.URL, e.admin, nil)
	dir := b.TempDir()
	f, err := os.Create(filepath.Join(dir, "model.bin"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		b.Fatal(err)
	}
	f.Close()
	sdk := e.s3.Client()
	b.Run(fmt.Sprintf("sdk-put-%dMiB", mb), func(b *testing.B) {
		b.SetBytes(size)
		for i := range b.N {
			f, _ := os.Open(filepath.Join(dir, "model.bin"))
			_, err := sdk.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("art"), Key: aws.String(fmt.Sprintf("plain/%d", i)), Body: f, ContentLength: aws.Int64(size)})
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(fmt.Sprintf("push-%dMiB", mb), func(b *testing.B) {
		b.SetBytes(size)
		for i := range b.N {
			// A new name each time: nothing is stored already.
			if _, sent, err := pushDir(ctx, c, "a", fmt.Sprintf("bench-%d", i), dir); err != nil || sent != size {
				b.Fatalf("push: sent %d, %v", sent, err)
			}
		}
	})
	b.Run(fmt.Sprintf("sdk-get-%dMiB", mb), func(b *testing.B) {
		b.SetBytes(size)
		for range b.N {
			out, err := sdk.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("art"), Key: aws.String("plain/0")})
			if err != nil {
				b.Fatal(err)
			}
			dst, _ := os.Create(filepath.Join(b.TempDir(), "model.bin"))
			if _, err := io.Copy(dst, out.Body); err != nil {
				b.Fatal(err)
			}
			out.Body.Close()
			dst.Close()
		}
	})
	b.Run(fmt.Sprintf("get-%dMiB", mb), func(b *testing.B) {
		b.SetBytes(size)
		ref := model.ArtifactRef{Name: "bench-0"}
		a, err := c.Artifact(ctx, "a", ref)
		if err != nil {
			b.Fatal(err)
		}
		for range b.N {
			dst, _ := os.Create(filepath.Join(b.TempDir(), "model.bin"))
			if err := c.ArtifactFile(ctx, "a", ref, a.Files[0], dst); err != nil {
				b.Fatal(err)
			}
			dst.Close()
		}
	})
}
