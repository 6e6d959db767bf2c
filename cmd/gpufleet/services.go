package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/model"
)

func newServicesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Example: `  gpufleet services apply -f llm.yaml
  gpufleet services list
  curl -H "Authorization: Bearer $TOKEN" $SERVER/services/llm/v1/completions -d '{"prompt":"hi"}'`,
		Use:     "services",
		Aliases: []string{"service", "svc"},
		Short:   "Run inference endpoints: replicas behind the server's proxy at /services/NAME/, scaled on load",
	}
	cmd.AddCommand(newServicesApplyCmd(g), newServicesListCmd(g), newServicesGetCmd(g), newServicesDeleteCmd(g))
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
		for _, e := range s.Events {
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
