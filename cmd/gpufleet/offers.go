package main

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/model"
)

// offerFilters are the catalog filters `offers` and `gpus` share.
type offerFilters struct {
	gpus               []string
	minMem             string
	count              int
	spot, onDemand     bool
	providers, regions []string
}

func (f *offerFilters) flags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringSliceVar(&f.gpus, "gpu", nil, "GPU models (e.g. H100,A100-80GB)")
	fl.StringVar(&f.minMem, "min-gpu-memory", "", "minimum memory per GPU (e.g. 40Gi)")
	fl.IntVar(&f.count, "gpus", 0, "GPUs per instance")
	fl.BoolVar(&f.spot, "spot", false, "spot offers only")
	fl.BoolVar(&f.onDemand, "on-demand", false, "on-demand offers only")
	fl.StringSliceVar(&f.providers, "provider", nil, "providers: aws, gcp, azure, oci, lambda, vast")
	fl.StringSliceVar(&f.regions, "region", nil, "region patterns (e.g. 'us-*','europe-west4')")
	_ = cmd.RegisterFlagCompletionFunc("provider", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"aws", "gcp", "azure", "oci", "lambda", "vast"}, cobra.ShellCompDirectiveNoFileComp
	})
}

// values are the filters as GET /v1/offers parameters.
func (f *offerFilters) values() (url.Values, error) {
	if f.spot && f.onDemand {
		return nil, usageError{fmt.Errorf("--spot and --on-demand exclude each other; give neither to see both")}
	}
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("gpu", strings.Join(f.gpus, ","))
	set("minGpuMemory", f.minMem)
	if f.count > 0 {
		q.Set("gpus", strconv.Itoa(f.count))
	}
	set("provider", strings.Join(f.providers, ","))
	set("region", strings.Join(f.regions, ","))
	switch {
	case f.spot:
		q.Set("capacity", string(model.Spot))
	case f.onDemand:
		q.Set("capacity", string(model.OnDemand))
	}
	return q, nil
}

// defaultOfferPage is how many offers `gpufleet offers` shows at a time.
const defaultOfferPage = 50

// offerPage is `gpufleet offers` as JSON or YAML: one page of the matching
// offers and where it lies among them.
type offerPage struct {
	Items []model.Offer `json:"items"`
	// Total counts the offers that match, across pages.
	Total int `json:"total"`
	// Page is the page shown (from 1), of Limit offers each; Limit 0 shows
	// every match.
	Page  int `json:"page"`
	Limit int `json:"limit"`
}

func newOffersCmd(g *globals) *cobra.Command {
	var (
		out, sortBy        string
		limit, page        int
		maxPrice           float64
		unavailable, fleet bool
		filters            offerFilters
	)
	cmd := &cobra.Command{
		Use:   "offers",
		Short: "Query the built-in GPU catalog: instances, regions and prices",
		Long: `Query the GPU catalog compiled into gpufleet (AWS, GCP, Azure, OCI, Lambda and
Vast list prices, on-demand and spot). Prices are per GPU-hour and per
instance-hour. No server or cloud account is needed.

The catalog holds thousands of offers: they come a page at a time (--limit, 50
by default, cheapest per GPU-hour first); --page N shows the next ones and
--limit 0 shows all. The table says how many match; -o json gives them as
{"items": [...], "total": N, "page": P, "limit": L}. For one line per GPU
model with its price range, see gpufleet gpus.`,
		Example: `  gpufleet offers                     # the 50 cheapest offers per GPU-hour, and how many match
  gpufleet offers --page 2            # the next 50
  gpufleet offers --gpu H100 --min-gpu-memory 40Gi --gpus 8 --spot --region 'us-*' --sort price
  gpufleet offers --gpu A100,A100-80GB --provider gcp,aws --limit 0 -o json   # every match
  gpufleet offers --gpu L4 --max-price 1 --limit 10
  gpufleet offers --fleet --gpu H100   # with the fleet's owned machines at their declared prices
  gpufleet offers --unavailable   # what the running server's providers cannot sell now`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			if limit < 0 || page < 1 {
				return usageError{fmt.Errorf("--limit %d --page %d: want --limit ≥ 0 (0: all) and --page ≥ 1", limit, page)}
			}
			q, err := filters.values()
			if err != nil {
				return err
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
				return render(cmd.OutOrStdout(), out, items(us), func(tw *tabwriter.Writer) { unavailableTable(tw, us) })
			}
			if maxPrice > 0 {
				q.Set("maxPrice", strconv.FormatFloat(maxPrice, 'f', -1, 64))
			}
			q.Set("sort", sortBy)
			if limit > 0 {
				q.Set("limit", strconv.Itoa(limit))
				if page > 1 {
					q.Set("offset", strconv.Itoa((page-1)*limit))
				}
			}
			cat, err := catalog.Load()
			if err != nil {
				return err
			}
			query, problems := api.ParseOfferQuery(q, cat.CanonicalGPU)
			if err := problems.Err(); err != nil {
				return usageError{err}
			}
			res := offerPage{Page: page, Limit: limit}
			if fleet {
				c, err := g.client()
				if err != nil {
					return err
				}
				l, err := c.Offers(cmd.Context(), q)
				if err != nil {
					return err
				}
				res.Items, res.Total = l.Offers, l.Total
			} else {
				res.Items, res.Total = cat.Page(query, nil)
			}
			res.Items = items(res.Items).Items
			if out != "table" {
				return render(cmd.OutOrStdout(), out, res, nil)
			}
			if len(res.Items) == 0 {
				if res.Total > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "page %d is past the last: %d offers match, %d a page\n", page, res.Total, limit)
				} else {
					fmt.Fprintln(cmd.ErrOrStderr(), "no offers match; loosen a filter (see gpufleet offers --help)")
				}
				return nil
			}
			if err := catalog.Table(cmd.OutOrStdout(), res.Items); err != nil {
				return err
			}
			if first := (page-1)*limit + 1; len(res.Items) < res.Total {
				last := first + len(res.Items) - 1
				more := ""
				if last < res.Total {
					more = fmt.Sprintf(" Next: --page %d;", page+1)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "Offers %d–%d of %d.%s --limit 0 shows all; --gpu, --region, --spot narrow them.\n", first, last, res.Total, more)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	outputFlag(cmd, &out)
	filters.flags(cmd)
	fl.Float64Var(&maxPrice, "max-price", 0, "maximum price per instance-hour in USD")
	fl.StringVar(&sortBy, "sort", "price", "sort by price (per GPU-hour), total, memory or gpus")
	fl.IntVar(&limit, "limit", defaultOfferPage, "offers per page (0: all)")
	fl.IntVar(&page, "page", 1, "which page of --limit offers to show, from 1")
	fl.BoolVar(&fleet, "fleet", false, "ask the server: the catalog's offers and the fleet's owned machines at their declared prices")
	fl.BoolVar(&unavailable, "unavailable", false, "ask the server which offers and pool regions its providers cannot sell now (insufficient capacity, quota) and until when")
	_ = cmd.RegisterFlagCompletionFunc("sort", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"price", "total", "memory", "gpus"}, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

func newGPUsCmd() *cobra.Command {
	var (
		out     string
		tpus    bool
		filters offerFilters
	)
	cmd := &cobra.Command{
		Use:     "gpus",
		Aliases: []string{"gpu"},
		Short:   "List the catalog's GPU models with their memory and price ranges",
		Long: `List every GPU (and TPU) model in the built-in catalog, one line each: memory per
GPU, the providers that sell it, how many offers, and the cheapest and dearest
price per GPU-hour on demand and on spot. The same filters as gpufleet offers
narrow the offers the ranges are taken over. TPU slices, which the catalog
sells whole, one name per size, show with --tpu or when named with --gpu.
No server is needed.`,
		Example: `  gpufleet gpus
  gpufleet gpus --min-gpu-memory 80Gi --provider aws,gcp
  gpufleet gpus --region 'europe-*' --spot
  gpufleet gpus --tpu --provider gcp   # GPUs and every TPU slice size
  gpufleet gpus -o json
  gpufleet gpus -o jsonpath='{range .items[*]}{.gpu}{"\t"}{.onDemand.min}{"\n"}{end}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			q, err := filters.values()
			if err != nil {
				return err
			}
			cat, err := catalog.Load()
			if err != nil {
				return err
			}
			query, problems := api.ParseOfferQuery(q, cat.CanonicalGPU)
			if err := problems.Err(); err != nil {
				return usageError{err}
			}
			models := slices.DeleteFunc(cat.Models(query), func(m catalog.GPUModel) bool { return m.TPU && !tpus && len(query.GPUs) == 0 })
			if out == "table" && len(models) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no GPU model has offers that match; loosen a filter (see gpufleet gpus --help)")
				return nil
			}
			return render(cmd.OutOrStdout(), out, items(models), func(tw *tabwriter.Writer) {
				row(tw, "GPU", "MEMORY", "PROVIDERS", "OFFERS", "ON-DEMAND $/GPU-HR", "SPOT $/GPU-HR")
				for _, m := range models {
					mem := "-"
					switch {
					case m.MinGPUMemory > 0 && m.MinGPUMemory != m.GPUMemory:
						mem = m.MinGPUMemory.Human() + "–" + m.GPUMemory.Human()
					case m.GPUMemory > 0:
						mem = m.GPUMemory.Human()
					}
					row(tw, m.GPU, mem, strings.Join(m.Providers, ","), m.Offers, priceRange(m.OnDemand), priceRange(m.Spot))
				}
			})
		},
	}
	outputFlag(cmd, &out)
	filters.flags(cmd)
	cmd.Flags().BoolVar(&tpus, "tpu", false, "list TPU slices too, one line per size")
	return cmd
}

// priceRange writes a range of prices per GPU-hour: "$1.20–$3.40", one
// price when both ends agree, "-" for none.
func priceRange(r *catalog.PriceRange) string {
	switch {
	case r == nil:
		return "-"
	case fmt.Sprintf("%.2f", r.Min) == fmt.Sprintf("%.2f", r.Max):
		return fmt.Sprintf("$%.2f", r.Min)
	}
	return fmt.Sprintf("$%.2f–$%.2f", r.Min, r.Max)
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
