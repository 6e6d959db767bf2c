package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/podsync"
)

// newPodCmd is the hidden `pod` command: the sync containers of a
// Kubernetes replica's pod run it (internal/podsync).
func newPodCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "pod",
		Short:  "Checkpoint sync, dataset fetch and a service replica's gate inside a Kubernetes pod (run by gpufleet's containers; not for direct use)",
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
	var listen string
	var appPort int
	gateCmd := &cobra.Command{
		Use:     "gate",
		Short:   "Admit to the replica on 127.0.0.1:--app-port only the requests that carry " + model.ServiceKeySecret + " (a service replica's gate)",
		Example: "  " + model.ServiceKeySecret + "=… gpufleet pod gate --listen :9980 --app-port 8000",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			key := os.Getenv(model.ServiceKeySecret)
			_ = os.Unsetenv(model.ServiceKeySecret)
			if key == "" {
				return fmt.Errorf("%s is not set (this command runs in a gpufleet service replica's gate container)", model.ServiceKeySecret)
			}
			return podsync.ServeGate(c.Context(), podsync.GateConfig{Listen: listen, AppPort: appPort, Key: key, Log: log()})
		},
	}
	gateCmd.Flags().StringVar(&listen, "listen", ":9980", "where the gate listens: the port the replica's Service targets")
	gateCmd.Flags().IntVar(&appPort, "app-port", 0, "the replica's PORT on the pod's loopback (required)")
	_ = gateCmd.MarkFlagRequired("app-port")
	cmd.AddCommand(gateCmd)
	return cmd
}
