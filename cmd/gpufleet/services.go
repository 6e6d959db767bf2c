package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/model"
)

func newServicesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Example: `  gpufleet services apply -f llm.yaml
  gpufleet services list
  gpufleet services logs llm -f
  gpufleet explain service llm
  curl -H "Authorization: Bearer $TOKEN" $SERVER/services/llm/v1/completions -d '{"prompt":"hi"}'`,
		Use:     "services",
		Aliases: []string{"service", "svc"},
		Short:   "Run inference endpoints: replicas behind the server's proxy at /services/NAME/, scaled on load",
	}
	cmd.AddCommand(newServicesApplyCmd(g), newServicesListCmd(g), newServicesGetCmd(g), newServicesDeleteCmd(g), newServicesLogsCmd(g))
	return cmd
}

func newServicesApplyCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f service.yaml",
		Short: "Create or update a service from a Service manifest",
		Long: `Create or update a service from a manifest of kind Service (docs/services.md):

  apiVersion: gpufleet.dev/v1
  kind: Service
  metadata: {name: llm}
  spec:
    template:                 # each replica is a job made from this spec
      run: {command: [python, -m, server]}   # listens on $PORT
      resources: {gpus: 1}
    port: 8000                # replica i gets PORT=8000+i
    readiness: {path: /health, initialDelay: 10s}
    replicas: {min: 0, max: 4}
    autoscaling: {metric: inflight, target: 8, scaleDownWindow: 5m}
    update: {maxSurge: 1, maxUnavailable: 0}
    auth: {mode: token}       # or public, or {mode: apiKey, secrets: [LLM_KEY]}

A changed spec rolls the replicas to it; the same spec changes nothing.`,
		Example: `  gpufleet services apply -f llm.yaml
  cat llm.yaml | gpufleet services apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("give the manifest with -f FILE (or -f - for stdin)")
			}
			var data []byte
			var err error
			if file == "-" {
				data, err = io.ReadAll(cmd.InOrStdin())
			} else {
				data, err = os.ReadFile(file)
			}
			if err != nil {
				return fmt.Errorf("reading %s: %w", file, err)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			s, err := c.ApplyService(cmd.Context(), data, "application/yaml")
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "service %s applied (generation %d); reach it at %s\n", s.Name, s.Generation, s.URL)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "Service manifest (YAML or JSON); - reads stdin")
	return cmd
}

func newServicesListCmd(g *globals) *cobra.Command {
	return listCommand(g, &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List services with their replicas and traffic",
		Example: `  gpufleet services list
  gpufleet services list -o json`,
		Args: cobra.NoArgs,
	}, func(ctx context.Context, c *client.Client, _ []string) ([]api.ServiceView, error) {
		return c.Services(ctx)
	}, func(tw *tabwriter.Writer, ss []api.ServiceView) {
		row(tw, "NAME", "PROJECT", "READY", "DESIRED", "MIN-MAX", "IN FLIGHT", "REQUESTS", "TOKENS", "$/HOUR", "$/1M TOKENS", "URL")
		for _, s := range ss {
			row(tw, s.Name, s.Project, s.Ready, s.Desired, fmt.Sprintf("%d-%d", s.Spec.Replicas.Min, s.Spec.Replicas.Max), s.InFlight, s.Requests, s.Tokens,
				s.CostPerHour.USD(), perMillion(s), s.URL)
		}
	})
}

func newServicesGetCmd(g *globals) *cobra.Command {
	return readCommand(g, &cobra.Command{
		Use:   "get SERVICE",
		Short: "Show one service: replicas, traffic, cost ($/hour, $ per 1M tokens) and the autoscaler's decisions",
		Example: `  gpufleet services get llm
  gpufleet services get llm -o yaml`,
		Args: cobra.ExactArgs(1),
	}, func(ctx context.Context, c *client.Client, args []string) (*api.ServiceView, error) {
		return c.Service(ctx, args[0])
	}, func(tw *tabwriter.Writer, s *api.ServiceView) {
		row(tw, "NAME", s.Name)
		row(tw, "PROJECT", s.Project)
		row(tw, "URL", s.URL)
		row(tw, "AUTH", authOf(s.Spec.Auth))
		row(tw, "GENERATION", s.Generation)
		row(tw, "REPLICAS", fmt.Sprintf("%d ready, %d desired (min %d, max %d)", s.Ready, s.Desired, s.Spec.Replicas.Min, s.Spec.Replicas.Max))
		row(tw, "AUTOSCALING", dash(s.Spec.Autoscaling.Metric))
		row(tw, "IN FLIGHT", s.InFlight)
		row(tw, "REQUESTS", s.Requests)
		row(tw, "TOKENS", s.Tokens)
		row(tw, "COST NOW", s.CostPerHour.USD()+"/hour")
		row(tw, "COST", s.Cost.USD()+" since "+s.CreatedAt.Format("2006-01-02 15:04")+" (the ledger)")
		row(tw, "COST PER 1M TOKENS", perMillion(*s))
		for _, r := range s.Replicas {
			row(tw, fmt.Sprintf("REPLICA %d", r.Slot), fmt.Sprintf("%s %s gen %d %s in-flight %d", r.Job, r.State, r.Generation, dash(r.Address), r.InFlight))
		}
		for _, h := range s.Spec.Hosts {
			row(tw, "HOST", h)
		}
		for _, e := range s.Decisions[max(len(s.Decisions)-20, 0):] {
			row(tw, "SCALED", e.Time.Format("15:04:05")+" "+e.Message)
		}
	})
}

func newServicesDeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "delete SERVICE",
		Aliases: []string{"rm"},
		Short:   "Delete a service and cancel its replicas",
		Example: `  gpufleet services delete llm`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteService(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "service %s deleted\n", args[0])
			return nil
		},
	}
}

// perMillion is a service's cost per million tokens, or "-" before any
// token was counted.
func perMillion(s api.ServiceView) string {
	if s.Tokens == 0 {
		return "-"
	}
	return s.CostPerMillionTokens.USD()
}

// authOf says who may call a service.
func authOf(a model.ServiceAuth) string {
	if a.Mode == model.AuthAPIKey {
		return a.Mode + " (" + strings.Join(a.Secrets, ", ") + ")"
	}
	return a.Mode
}

func newServicesLogsCmd(g *globals) *cobra.Command {
	var (
		follow  bool
		replica int
	)
	cmd := &cobra.Command{
		Use:   "logs SERVICE",
		Short: "Print the output of a service's replicas",
		Long: `Prints the output of every replica of a service, each line prefixed with
[replica N] (N is the replica's slot; it listens on port + N), one replica
after the other; or one replica's, unprefixed, with --replica N. With -f it
follows them until interrupted, and takes on replicas that start meanwhile
(a scale-up, a rolling update, a replacement).`,
		Example: `  gpufleet services logs llm
  gpufleet services logs llm -f                 # every replica, as it comes, lines prefixed [replica N]
  gpufleet services logs llm --replica 0 -f     # one replica's output, followed across its attempts`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			s, err := c.Service(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("replica") {
				for _, r := range s.Replicas {
					if r.Slot != replica {
						continue
					}
					if follow {
						_, err := followJob(cmd, c, r.Job, 0, cmd.OutOrStdout())
						return err
					}
					_, err := c.Logs(cmd.Context(), r.Job, client.LogOptions{}, cmd.OutOrStdout())
					return err
				}
				return usageError{fmt.Errorf("--replica %d: service %s has no replica in slot %d (%s); see `gpufleet services get %s`", replica, s.Name, replica, slotsOf(s), s.Name)}
			}
			if follow {
				return followReplicas(cmd, c, s)
			}
			if len(s.Replicas) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "gpufleet: service %s has no replicas now (%d desired); follow it with `gpufleet services logs -f %s`\n", s.Name, s.Desired, s.Name)
				return nil
			}
			for _, r := range s.Replicas {
				pw := &prefixWriter{w: cmd.OutOrStdout(), prefix: fmt.Sprintf("[replica %d] ", r.Slot)}
				if _, err := c.Logs(cmd.Context(), r.Job, client.LogOptions{}, pw); err != nil {
					return fmt.Errorf("replica %d (%s): %w", r.Slot, r.Job, err)
				}
				pw.Flush()
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stream the output until interrupted, taking on new replicas")
	cmd.Flags().IntVar(&replica, "replica", 0, "only the replica in this slot (see `gpufleet services get`)")
	return cmd
}

// serviceFollowPoll is how often a followed service is asked for replicas
// that started since.
const serviceFollowPoll = 2 * time.Second

// followReplicas follows the output of every replica of s, and of each
// that starts later, lines prefixed [replica N], until the command is
// interrupted or the service is deleted.
func followReplicas(cmd *cobra.Command, c *client.Client, s *api.ServiceView) error {
	ctx := cmd.Context()
	out := &lockedWriter{w: cmd.OutOrStdout()}
	followed := map[string]bool{}
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(serviceFollowPoll)
	defer tick.Stop()
	for {
		for _, r := range s.Replicas {
			if followed[r.Job] {
				continue
			}
			followed[r.Job] = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				pw := &prefixWriter{w: out, prefix: fmt.Sprintf("[replica %d] ", r.Slot)}
				if _, err := followJob(cmd, c, r.Job, 0, pw); err != nil && ctx.Err() == nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "gpufleet: replica %d (%s): %v\n", r.Slot, r.Job, err)
				}
				pw.Flush()
			}()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		next, err := c.Service(ctx, s.Name)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		s = next
	}
}

// slotsOf lists a service's replica slots, for an error.
func slotsOf(s *api.ServiceView) string {
	if len(s.Replicas) == 0 {
		return "it has none now"
	}
	slots := make([]string, len(s.Replicas))
	for i, r := range s.Replicas {
		slots[i] = strconv.Itoa(r.Slot)
	}
	return "its slots: " + strings.Join(slots, ", ")
}
