package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/archive"
	"github.com/gpufleet/gpufleet/internal/manifest"
)

// uploadWorkdir packs the job's working directory, uploads it, and returns
// the manifest with spec.run.archive set: each node unpacks the archive and
// runs the command in it, wherever it is.
func uploadWorkdir(ctx context.Context, c *client.Client, body []byte) ([]byte, error) {
	var job manifest.Job
	if err := json.Unmarshal(body, &job); err != nil {
		return nil, fmt.Errorf("reading the job to upload its workdir: %w", err)
	}
	tmp, err := os.CreateTemp("", "gpufleet-workdir-*.tar.gz")
	if err != nil {
		return nil, fmt.Errorf("packing workdir: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	dir := job.Spec.Run.Workdir
	digest, err := archive.Pack(dir, tmp, archive.Limits{})
	if err != nil {
		return nil, fmt.Errorf("packing workdir %s: %w", dir, err)
	}
	if _, err := tmp.Seek(0, 0); err != nil {
		return nil, fmt.Errorf("packing workdir: %w", err)
	}
	// The archive is the job's project's: only its jobs may name it.
	got, err := c.UploadArchive(ctx, tmp, job.Metadata.Project, archive.DigestPrefix+digest)
	if err != nil {
		return nil, fmt.Errorf("uploading workdir %s: %w", dir, err)
	}
	job.Spec.Run.Archive, job.Spec.Run.Workdir = got, ""
	return json.Marshal(job)
}
