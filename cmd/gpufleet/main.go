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
	// Client target overrides (see target in clientcfg.go).
	server, token, project, contextName, config string
	// localFirst: --data-dir or GPUFLEET_DATA_DIR was given, so its local
	// server beats the current context (not an explicit --context).
	localFirst bool
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
	pf := root.PersistentFlags()
	pf.StringVar(&g.dataDir, "data-dir", defaultDataDir(), "gpufleet's state directory (env GPUFLEET_DATA_DIR)")
	pf.StringVar(&g.server, "server", "", "the server's URL (default: env GPUFLEET_SERVER, the current context, or the local server in --data-dir)")
	pf.StringVar(&g.token, "token", "", "bearer token (default: env GPUFLEET_TOKEN, the context's token, or the local admin token); prefer 'gpufleet login', which keeps it out of ps")
	pf.StringVar(&g.project, "project", "", "default project (env GPUFLEET_PROJECT, else the context's; see 'gpufleet config set-project')")
	pf.StringVar(&g.contextName, "context", "", "the CLI context to use (env GPUFLEET_CONTEXT; see 'gpufleet config get-contexts')")
	pf.StringVar(&g.config, "config", "", "the CLI config file (env GPUFLEET_CONFIG, default ~/.config/gpufleet/config.yaml)")
	root.AddCommand(
		newUpCmd(g), newServerCmd(g), newRunCmd(g), newJobsCmd(g), newNodesCmd(g),
		newOffersCmd(g), newGPUsCmd(), newTokensCmd(g), newProjectsCmd(g), newRolesCmd(g), newUsersCmd(g), newAuditCmd(g), newQueuesCmd(g), newServicesCmd(g), newProxyCmd(g), newPlanCmd(g), newApplyCmd(g), newHistoryCmd(g), newRollbackCmd(g), newDriftCmd(g), newExplainCmd(g), newVersionCmd(g), newSuperviseCmd(), newAgentCmd(g), newEventsCmd(g), newAdviseCmd(g), newBenchCmd(g),
		newCostCmd(g), newBudgetsCmd(g), newMetricCmd(), newSecretsCmd(g), newImagesCmd(),
		newStoreCmd(g), newArtifactsCmd(g), newLoginCmd(g), newLogoutCmd(g), newConfigCmd(g), newSimulateCmd(), newPodCmd(),
	)
	root.PersistentPreRun = func(cmd *cobra.Command, _ []string) {
		g.localFirst = cmd.Flags().Changed("data-dir") || os.Getenv("GPUFLEET_DATA_DIR") != ""
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w\nSee '%s --help'.", err, c.CommandPath())}
	})
	strictGroups(root)
	addCompletions(root, g)
	return root
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	var ee exitError
	if errors.As(err, &ee) {
		os.Exit(ee.code)
	}
	if err != nil {
		code, msg := classify(err)
		fmt.Fprintln(os.Stderr, "gpufleet:", msg)
		os.Exit(code)
	}
}
