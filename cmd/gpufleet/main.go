// Command gpufleet is the GPU compute platform: one binary that is the
// server (`gpufleet up`, `gpufleet server`), the node supervisor, and the CLI.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// exitError carries a process exit code out of a command (run --follow
// exits with the job's code).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// globals are the flags every command shares.
type globals struct {
	dataDir string
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "gpufleet",
		Short: "Run GPU jobs across clouds, owned machines and this one",
		Long: `gpufleet queues GPU jobs, places them on the cheapest fitting GPUs, runs them,
and keeps them running through restarts.

Start a server on this machine with 'gpufleet up', then submit work with
'gpufleet run'. Client commands find the server through GPUFLEET_SERVER and
GPUFLEET_TOKEN, or else through the data dir that 'gpufleet up' wrote.`,
		Example: `  gpufleet up --fake-gpus 8xH100
  gpufleet run --gpus 0 -- sh -c 'echo hello'
  gpufleet jobs list
  gpufleet offers --gpu H100 --gpus 8 --spot --region 'us-*'`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.dataDir, "data-dir", defaultDataDir(), "gpufleet's state directory (env GPUFLEET_DATA_DIR)")
	root.AddCommand(
		newUpCmd(g), newServerCmd(g), newRunCmd(g), newJobsCmd(g), newNodesCmd(g),
		newOffersCmd(g), newTokensCmd(g), newProjectsCmd(g), newRolesCmd(g), newUsersCmd(g), newAuditCmd(g), newQueuesCmd(g), newPlanCmd(g), newApplyCmd(g), newHistoryCmd(g), newRollbackCmd(g), newDriftCmd(g), newExplainCmd(g), newVersionCmd(g), newSuperviseCmd(), newAgentCmd(g), newEventsCmd(g), newAdviseCmd(g), newBenchCmd(g),
		newCostCmd(g), newBudgetsCmd(g), newMetricCmd(), newSecretsCmd(g), newImagesCmd(),
		newStoreCmd(g),
	)
	return root
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	var ee exitError
	switch {
	case errors.As(err, &ee):
		os.Exit(ee.code)
	case err != nil:
		fmt.Fprintln(os.Stderr, "gpufleet:", err)
		os.Exit(1)
	}
}
