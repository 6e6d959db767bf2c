package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// BuildOptions describe one image build.
type BuildOptions struct {
	// File is the Containerfile; Context the folder its COPY reads from.
	File, Context string
	// Tag names the image (localhost/app:1).
	Tag string
}

// Build builds an image with podman, running its RUN steps under the same
// OCI runtime and rlimits as replicas, and streams podman's output to out.
func Build(ctx context.Context, p Podman, o BuildOptions, out io.Writer) error {
	nofile, nproc := HardLimits()
	args := []string{"build"}
	if p.OCIRuntime != "" {
		args = append(args, "--runtime", p.OCIRuntime)
	}
	args = append(args,
		"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile, nofile),
		"--ulimit", fmt.Sprintf("nproc=%d:%d", nproc, nproc),
		"--tag", o.Tag)
	if o.File != "" {
		args = append(args, "--file", o.File)
	}
	args = append(args, o.Context)
	cmd := exec.CommandContext(ctx, p.Path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s: podman build: %w", o.Tag, err)
	}
	return nil
}

// Image is what gpufleet reads of a local image.
type Image struct {
	Name string
	ID   string
	// CUDA is the CUDA version the image was built for, from its
	// com.nvidia.cuda.version label or CUDA_VERSION variable (NVIDIA's
	// CUDA images set both); empty when it names none.
	CUDA string
}

// Inspect reads a local image.
func Inspect(ctx context.Context, p Podman, name string) (Image, error) {
	out, err := exec.CommandContext(ctx, p.Path, "image", "inspect", "--format", "json", name).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return Image{}, fmt.Errorf("inspecting image %s: %s", name, strings.TrimSpace(string(ee.Stderr)))
		}
		return Image{}, fmt.Errorf("inspecting image %s: %w", name, err)
	}
	var docs []struct {
		ID     string `json:"Id"`
		Labels map[string]string
		Config struct{ Env []string }
	}
	if err := json.Unmarshal(out, &docs); err != nil || len(docs) == 0 {
		return Image{}, fmt.Errorf("inspecting image %s: unexpected answer from podman", name)
	}
	d := docs[0]
	img := Image{Name: name, ID: d.ID, CUDA: d.Labels["com.nvidia.cuda.version"]}
	if img.CUDA == "" {
		for _, kv := range d.Config.Env {
			if v, ok := strings.CutPrefix(kv, "CUDA_VERSION="); ok {
				img.CUDA = v
			}
		}
	}
	return img, nil
}

// LocalImageCUDA is the CUDA version of image where podman on this machine
// has it, else "": a best-effort hint for the scheduler's CUDA check.
func LocalImageCUDA(ctx context.Context, image string) string {
	path, err := exec.LookPath("podman")
	if err != nil {
		return ""
	}
	img, err := Inspect(ctx, Podman{Path: path}, image)
	if err != nil {
		return ""
	}
	return img.CUDA
}
