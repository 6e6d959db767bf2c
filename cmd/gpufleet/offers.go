package main

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/model"
)

func newOffersCmd(g *globals) *cobra.Command {
	var (
		out                string
		gpus               []string
		minMem, sortBy     string
		count, limit       int
		spot, onDemand     bool
		providers, regions []string
		maxPrice           float64
		unavailable, fleet bool
	)
	cmd := &cobra.Command{
		Use:   "offers",
		Short: "Query the built-in GPU catalog: instances, regions and prices",
		Long: `Query the GPU catalog compiled into gpufleet (AWS, GCP, Azure, OCI, Lambda and
Vast list prices, on-demand and spot). Prices are per GPU-hour and per
instance-hour. No server or cloud account is needed.`,
		Example: `  gpufleet offers --gpu H100 --min-gpu-memory 40Gi --gpus 8 --spot --region 'us-*' --sort price
  gpufleet offers --gpu A100,A100-80GB --provider gcp,aws -o json
  gpufleet offers --gpu L4 --max-price 1 --limit 10
  gpufleet offers --fleet --gpu H100   # with the fleet's owned machines at their declared prices
  gpufleet offers --unavailable   # what the running server's providers cannot sell now`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			if spot && onDemand {
				return fmt.Errorf("--spot and --on-demand exclude each other; give neither to see both")
			}
			if unavailable {
				c, err := g.client()
				if err != nil {
					return err
				}
				us, err := c.Unavailable(cmd.Context())
				if err != nil {
					return err
				}
				return render(cmd.OutOrStdout(), out, api.UnavailableList{Unavailable: us}, func(tw *tabwriter.Writer) { unavailableTable(tw, us) })
			}
			cat, err := catalog.Load()
			if err != nil {
				return err
			}
			q := url.Values{}
			set := func(k, v string) {
				if v != "" {
					q.Set(k, v)
				}
			}
			set("gpu", strings.Join(gpus, ","))
			set("minGpuMemory", minMem)
			if count > 0 {
				q.Set("gpus", strconv.Itoa(count))
			}
			set("provider", strings.Join(providers, ","))
			set("region", strings.Join(regions, ","))
			switch {
			case spot:
				q.Set("capacity", string(model.Spot))
			case onDemand:
				q.Set("capacity", string(model.OnDemand))
			}
			if maxPrice > 0 {
				q.Set("maxPrice", strconv.FormatFloat(maxPrice, 'f', -1, 64))
			}
			set("sort", sortBy)
			if limit > 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			query, problems := api.ParseOfferQuery(q, cat.CanonicalGPU)
			if err := problems.Err(); err != nil {
				return err
			}
			offers := cat.Query(query)
			if fleet {
				c, err := g.client()
				if err != nil {
					return err
				}
				if offers, err = c.Offers(cmd.Context(), q); err != nil {
					return err
				}
			}
			if out == "table" {
				if len(offers) == 0 {
					fmt.Fprintln(cmd.ErrOrStderr(), "no offers match; loosen a filter (see gpufleet offers --help)")
					return nil
				}
				return catalog.Table(cmd.OutOrStdout(), offers)
			}
			return render(cmd.OutOrStdout(), out, api.OfferList{Offers: offers}, nil)
		},
	}
	fl := cmd.Flags()
	outputFlag(cmd, &out)
	fl.StringSliceVar(&gpus, "gpu", nil, "GPU models (e.g. H100,A100-80GB)")
	fl.StringVar(&minMem, "min-gpu-memory", "", "minimum memory per GPU (e.g. 40Gi)")
	fl.IntVar(&count, "gpus", 0, "GPUs per instance")
	fl.BoolVar(&spot, "spot", false, "spot offers only")
	fl.BoolVar(&onDemand, "on-demand", false, "on-demand offers only")
	fl.StringSliceVar(&providers, "provider", nil, "providers: aws, gcp, azure, oci, lambda, vast")
	fl.StringSliceVar(&regions, "region", nil, "region patterns (e.g. 'us-*','europe-west4')")
	fl.Float64Var(&maxPrice, "max-price", 0, "maximum price per instance-hour in USD")
	fl.StringVar(&sortBy, "sort", "price", "sort by price (per GPU-hour), total, memory or gpus")
	fl.IntVar(&limit, "limit", 0, "most offers to show")
	fl.BoolVar(&fleet, "fleet", false, "ask the server: the catalog's offers and the fleet's owned machines at their declared prices")
	fl.BoolVar(&unavailable, "unavailable", false, "ask the server which offers and pool regions its providers cannot sell now (insufficient capacity, quota) and until when")
	_ = cmd.RegisterFlagCompletionFunc("sort", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"price", "total", "memory", "gpus"}, cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.RegisterFlagCompletionFunc("provider", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"aws", "gcp", "azure", "oci", "lambda", "vast"}, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// unavailableTable lists unavailable offers and regions, one a line.
func unavailableTable(tw *tabwriter.Writer, us []model.Unavailable) {
	row(tw, "KIND", "POOL", "OFFER", "UNTIL", "REASON")
	for _, u := range us {
		o := u.Offer
		what := fmt.Sprintf("%s/%s/%s %s %s", o.Provider, o.Region, o.Zone, o.InstanceType, o.CapacityType)
		if u.Kind == model.UnavailableQuota {
			what = fmt.Sprintf("%s/%s (whole region, this pool)", o.Provider, o.Region)
		}
		row(tw, u.Kind, u.Pool, what, fmt.Sprintf("%s (in %s)", u.Until.Format(time.RFC3339), max(time.Until(u.Until), 0).Round(time.Second)), u.Reason)
	}
}
