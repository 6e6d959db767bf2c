package catalog

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Table writes offers as an aligned table in the style of sky show-gpus, one
// line per offer in the order given. Memory is in GiB; "-" marks a figure
// the catalog lacks (a TPU slice's vCPUs and memory) or an empty zone.
func Table(w io.Writer, offers []model.Offer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if _, err := fmt.Fprintln(tw, "GPU\tQTY\tCLOUD\tINSTANCE_TYPE\tGPU_MEM\tvCPUs\tHOST_MEM\t$/GPU-HR\t$/HR\tCAPACITY\tREGION\tZONE"); err != nil {
		return fmt.Errorf("writing offer table: %w", err)
	}
	for _, o := range offers {
		_, err := fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t$%.3f\t$%.3f\t%s\t%s\t%s\n",
			o.GPU, o.GPUCount, o.Provider, o.InstanceType, gibString(o.GPUMemory), orDash(o.VCPUs), gibString(o.Memory),
			o.PricePerGPUHour(), o.PricePerHour, o.CapacityType, o.Region, dashIfEmpty(o.Zone))
		if err != nil {
			return fmt.Errorf("writing offer table: %w", err)
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing offer table: %w", err)
	}
	return nil
}

// gibString writes b in GiB to two decimals at most ("22.35GiB").
func gibString(b model.Bytes) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatFloat(math.Round(b.GiB()*100)/100, 'f', -1, 64) + "GiB"
}

func orDash(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
