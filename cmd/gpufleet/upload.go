package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/archive"
	"github.com/gpufleet/gpufleet/internal/manifest"
)

// uploadWorkdir packs the job's working directory, uploads it, and returns
// the manifest with spec.run.archive set: each node unpacks the archive and
// runs the command in it, wherever it is.
// It leaves out what archive.Ignore ignores, refuses a file over maxFile
// bytes (0: no limit), and tells log what it uploads.
func uploadWorkdir(ctx context.Context, c *client.Client, body []byte, maxFile int64, log io.Writer) ([]byte, error) {
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
	skip, err := archive.Ignore(dir)
	if err != nil {
		return nil, fmt.Errorf("packing workdir %s: %w", dir, err)
	}
	digest, st, err := archive.PackStats(dir, tmp, archive.Limits{MaxFileBytes: maxFile, Skip: skip})
	if errors.Is(err, archive.ErrFileTooLarge) {
		return nil, fmt.Errorf("packing workdir %s: %w; or pass --upload-max-file 0", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("packing workdir %s: %w", dir, err)
	}
	packed, _ := tmp.Seek(0, io.SeekCurrent)
	fmt.Fprintf(log, "gpufleet: uploading %s: %d files, %s (%s compressed); %d entries left out by .gitignore, .gpufleetignore and .git\n",
		dir, st.Files, humanBytes(st.Bytes), humanBytes(packed), st.Skipped)
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

// humanBytes writes n as 512 B, 1.5 KiB, 12.3 MiB or 2.0 GiB.
func humanBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, units := float64(n)/1024, []string{"KiB", "MiB", "GiB", "TiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
