package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/cuda"
)

func newImagesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "images",
		Short: "Build and check the container images jobs run in (on this node)",
		Long: `Build layered container images on this node with podman (runc, the same
rlimits as jobs), and check an image's CUDA version against this node's
driver. A job names its image with --image or spec.run.image; only nodes
with a container runtime take such jobs.`,
		Example: `  gpufleet images build -t localhost/app:1 ./app
  gpufleet images check localhost/app:1
  examples/images/build.sh      # base → framework → app, no registry needed`,
	}
	cmd.AddCommand(newImagesBuildCmd(), newImagesCheckCmd())
	return cmd
}

func newImagesBuildCmd() *cobra.Command {
	var file, tag string
	cmd := &cobra.Command{
		Use:   "build -t NAME [-f Containerfile] CONTEXT",
		Short: "Build an image with podman on this node",
		Example: `  gpufleet images build -t localhost/gpufleet-example/base:1 examples/images/base
  gpufleet images build -t localhost/app:2 -f app/Containerfile.gpu app`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tag == "" {
				return fmt.Errorf("--tag is required: name the image, e.g. -t localhost/app:1")
			}
			p, ok, why := runtime.DetectPodman(cmd.Context(), "")
			if !ok {
				return fmt.Errorf("no container runtime here: %s (install podman and runc, and run as root)", why)
			}
			return runtime.Build(cmd.Context(), p, runtime.BuildOptions{File: file, Context: args[0], Tag: tag}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVarP(&tag, "tag", "t", "", "the image's name, e.g. localhost/app:1 (required)")
	cmd.Flags().StringVarP(&file, "file", "f", "", "the Containerfile (default CONTEXT/Containerfile)")
	return cmd
}

func newImagesCheckCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "check IMAGE",
		Short: "Say whether an image's CUDA version runs on this node's driver",
		Long: `Read the image's CUDA version (its com.nvidia.cuda.version label or CUDA_VERSION
variable) and compare it with this node's NVIDIA driver by NVIDIA's table of
minimum drivers. Agents make the same check before they start a replica.`,
		Example: `  gpufleet images check localhost/gpufleet-example/app:1
  gpufleet images check nvidia/cuda:12.4.1-runtime-ubuntu22.04 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			p, ok, why := runtime.DetectPodman(cmd.Context(), "")
			if !ok {
				return fmt.Errorf("no container runtime here: %s", why)
			}
			img, err := runtime.Inspect(cmd.Context(), p, args[0])
			if err != nil {
				return err
			}
			driver := runtime.DriverVersion(cmd.Context())
			v := cuda.Check(img.CUDA, driver)
			if driver == "" && img.CUDA != "" {
				v.Reason += " (containers still run on nodes with fake GPUs, where nothing is checked)"
			}
			res := struct {
				Image      string `json:"image"`
				CUDA       string `json:"cuda,omitempty"`
				Driver     string `json:"driver,omitempty"`
				Compatible bool   `json:"compatible"`
				Reason     string `json:"reason"`
			}{img.Name, img.CUDA, driver, v.OK, v.Reason}
			return render(cmd.OutOrStdout(), out, res, func(tw *tabwriter.Writer) {
				row(tw, "IMAGE", "CUDA", "DRIVER", "COMPATIBLE", "REASON")
				row(tw, res.Image, dash(res.CUDA), dash(res.Driver), res.Compatible, res.Reason)
			})
		},
	}
	outputFlag(cmd, &out)
	return cmd
}
