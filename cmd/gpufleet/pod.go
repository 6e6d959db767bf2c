package main

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/podsync"
)

// newPodCmd is the hidden `pod` command: the sync containers of a
// Kubernetes replica's pod run it (internal/podsync).
func newPodCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "pod",
		Short:  "Checkpoint sync and dataset fetch inside a Kubernetes pod (run by gpufleet's sync containers; not for direct use)",
		Hidden: true,
	}
	var dir string
	cmd.PersistentFlags().StringVar(&dir, "dir", "", "the volume's folder (default "+podsync.CheckpointDir+" for restore and sync, "+podsync.DataDir+" for fetch-data)")
	or := func(d string) string {
		if dir != "" {
			return dir
		}
		return d
	}
	log := func() *slog.Logger { return slog.New(slog.NewTextHandler(os.Stderr, nil)) }
	spec := func() (podsync.Spec, error) {
		s, err := podsync.FromEnv()
		_ = os.Unsetenv(podsync.EnvSpec)
		return s, err
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "restore",
		Short:   "Restore the job's latest checkpoint into " + podsync.CheckpointDir,
		Example: "  GPUFLEET_SYNC=… gpufleet pod restore",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			s, err := spec()
			if err != nil {
				return err
			}
			return podsync.Restore(c.Context(), s, or(podsync.CheckpointDir), log())
		},
	}, &cobra.Command{
		Use:     "sync",
		Short:   "Upload each new checkpoint in " + podsync.CheckpointDir + ", and once more on SIGTERM (rank 0 only)",
		Example: "  GPUFLEET_SYNC=… RANK=0 gpufleet pod sync",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			s, err := spec()
			if err != nil {
				return err
			}
			if r := os.Getenv("RANK"); r != "" && r != "0" {
				<-c.Context().Done() // rank 0 writes the checkpoints
				return nil
			}
			return podsync.Sync(c.Context(), s, or(podsync.CheckpointDir), 0, log())
		},
	}, &cobra.Command{
		Use:     "fetch-data",
		Short:   "Fetch the job's datasets into " + podsync.DataDir,
		Example: "  GPUFLEET_SYNC=… gpufleet pod fetch-data",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			s, err := spec()
			if err != nil {
				return err
			}
			return podsync.FetchData(c.Context(), s, or(podsync.DataDir), log())
		},
	})
	return cmd
}
