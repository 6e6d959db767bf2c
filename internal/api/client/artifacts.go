package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// ErrCorrupt: a file received did not match its manifest's size and
// SHA-256, or the server found its stored object corrupt.
var ErrCorrupt = errors.New("artefact file failed verification")

// Artifacts lists a project's checkpoints and pushed artefacts.
func (c *Client) Artifacts(ctx context.Context, project string, f model.ArtifactFilter) ([]model.Artifact, error) {
	q := url.Values{"project": {project}}
	for k, v := range map[string]string{"job": f.Job, "name": f.Name, "kind": f.Kind} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var out model.ArtifactList
	if _, err := c.do(ctx, "GET", "/v1/artifacts?"+q.Encode(), nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// artifactPath is the API path of the artefact r of project.
func artifactPath(project string, r model.ArtifactRef) string {
	p := "/v1/artifacts/" + url.PathEscape(project)
	if r.Job != "" {
		return p + "/checkpoints/" + url.PathEscape(r.Job)
	}
	return p + "/models/" + url.PathEscape(r.Name)
}

func versionQuery(r model.ArtifactRef) string {
	if r.Version == "" {
		return ""
	}
	return "?" + url.Values{"version": {r.Version}}.Encode()
}

// Artifact returns one artefact with its files.
func (c *Client) Artifact(ctx context.Context, project string, r model.ArtifactRef) (*model.Artifact, error) {
	var out model.Artifact
	if _, err := c.do(ctx, "GET", artifactPath(project, r)+versionQuery(r), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ArtifactFile writes file f of artefact r to w and verifies what arrived
// against f's size and SHA-256 (the server verifies too, as it reads the
// storage). A failure wraps ErrCorrupt and names the file; w may then hold
// part of it.
func (c *Client) ArtifactFile(ctx context.Context, project string, r model.ArtifactRef, f model.ArtifactFile, w io.Writer) error {
	q := url.Values{"path": {f.Path}}
	if r.Version != "" {
		q.Set("version", r.Version)
	}
	path := artifactPath(project, r) + "/file?" + q.Encode()
	resp, err := c.do(ctx, "GET", path, nil, nil, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), resp.Body)
	if msg := resp.Trailer.Get(api.ArtifactErrorTrailer); msg != "" {
		return fmt.Errorf("%s: the server stopped sending it: %s: %w", f.Path, msg, ErrCorrupt)
	}
	if err != nil {
		return fmt.Errorf("%s: receiving it: %w", f.Path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != f.Size || got != f.SHA256 {
		return fmt.Errorf("%s: received %d bytes with sha256 %s, want %d with %s: %w", f.Path, n, got, f.Size, f.SHA256, ErrCorrupt)
	}
	return nil
}

// PushSource opens the content of one file of a push.
type PushSource func(f model.ArtifactFile) (io.ReadCloser, error)

// PushArtifact pushes files as a new version of project's artefact name:
// it commits, sends the files whose content the server lacks, and commits
// again. sent is how many bytes it sent.
func (c *Client) PushArtifact(ctx context.Context, project, name string, p model.ArtifactPush, open PushSource) (a *model.Artifact, sent int64, err error) {
	path := "/v1/artifacts/" + url.PathEscape(project) + "/models/" + url.PathEscape(name)
	for round := 0; round < 3; round++ {
		var res api.PushResult
		if err := c.post(ctx, path, p, &res); err != nil {
			return nil, sent, err
		}
		if res.Artifact != nil {
			return res.Artifact, sent, nil
		}
		for _, sum := range res.Missing {
			f, ok := fileBySum(p.Files, sum)
			if !ok {
				return nil, sent, fmt.Errorf("the server asked for content %s, which the push does not hold", sum)
			}
			n, err := c.putObject(ctx, path, f, open)
			sent += n
			if err != nil {
				return nil, sent, err
			}
		}
	}
	return nil, sent, errors.New("the server still lacks files after they were sent; try again")
}

func fileBySum(files []model.ArtifactFile, sum string) (model.ArtifactFile, bool) {
	for _, f := range files {
		if f.SHA256 == sum {
			return f, true
		}
	}
	return model.ArtifactFile{}, false
}

func (c *Client) putObject(ctx context.Context, path string, f model.ArtifactFile, open PushSource) (int64, error) {
	rc, err := open(f)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	body := &counter{r: io.LimitReader(rc, f.Size), size: f.Size}
	resp, err := c.do(ctx, "PUT", path+"/objects/"+f.SHA256, http.Header{"Content-Type": {"application/octet-stream"}}, body, nil)
	if err != nil {
		return body.n, fmt.Errorf("sending %s: %w", f.Path, err)
	}
	resp.Body.Close()
	return body.n, nil
}

// counter counts what is read of a body of known size (Size: the
// request's Content-Length).
type counter struct {
	r    io.Reader
	size int64
	n    int64
}

// Size is the body's length.
func (c *counter) Size() int64 { return c.size }

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// DeleteArtifact deletes artefacts: a checkpoint of a step (r.Job and
// r.Version), a version of a pushed artefact, or with all every version.
func (c *Client) DeleteArtifact(ctx context.Context, project string, r model.ArtifactRef, all bool) (int, error) {
	path := artifactPath(project, r)
	switch {
	case r.Job != "":
		path += "/steps/" + url.PathEscape(r.Version)
	case all:
		path += "?all=true"
	default:
		path += versionQuery(r)
	}
	var out api.DeleteResult
	if _, err := c.do(ctx, "DELETE", path, nil, nil, &out); err != nil {
		return 0, err
	}
	return out.Deleted, nil
}
