package simulate

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Plots are the charts of a comparison, by file stem.
var Plots = []struct {
	Name, Title string
	build       func(runs []Named) (*plot.Plot, error)
}{
	{"cost", "Cumulative cost by capacity type", costPlot},
	{"queue", "Jobs waiting", queuePlot},
	{"utilisation", "GPU utilisation (allocated / metered GPU time, daily)", utilisationPlot},
	{"wait-cdf", "Queue wait CDF", waitPlot},
}

// WritePlots writes every chart of runs into dir as SVG and PNG and
// returns the files written.
func WritePlots(dir string, runs []Named) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, pl := range Plots {
		p, err := pl.build(runs)
		if err != nil {
			return files, fmt.Errorf("plotting %s: %w", pl.Name, err)
		}
		for _, ext := range []string{"svg", "png"} {
			f := filepath.Join(dir, pl.Name+"."+ext)
			if err := p.Save(8*vg.Inch, 4*vg.Inch, f); err != nil {
				return files, fmt.Errorf("writing %s: %w", f, err)
			}
			files = append(files, f)
		}
	}
	return files, nil
}

// PlotSVG renders one chart of Plots as SVG.
func PlotSVG(name string, runs []Named) ([]byte, error) {
	for _, pl := range Plots {
		if pl.Name != name {
			continue
		}
		p, err := pl.build(runs)
		if err != nil {
			return nil, err
		}
		wt, err := p.WriterTo(8*vg.Inch, 4*vg.Inch, "svg")
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		if _, err := wt.WriteTo(&b); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	}
	return nil, fmt.Errorf("no plot %q", name)
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

// days is t's offset from the run's start in days.
func days(t time.Time) float64 { return t.Sub(Start).Hours() / 24 }

func line(p *plot.Plot, name string, xys plotter.XYs, c color.Color, dashed bool) error {
	if len(xys) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

// costPlot: cumulative ledger cost over simulated days, one colour per
// variant, one dash per capacity type that has any spend.
func costPlot(runs []Named) (*plot.Plot, error) {
	p := newPlot("Cumulative cost by capacity type", "simulated days", "USD")
	for i, r := range runs {
		for k, ct := range []model.CapacityType{model.OnDemand, model.Spot, model.Reserved, model.Owned} {
			if r.CostByCapacity[string(ct)] == 0 {
				continue
			}
			var xys plotter.XYs
			sum := 0.0
			for _, pt := range r.Series {
				sum += pt.CostUSD[string(ct)]
				xys = append(xys, plotter.XY{X: days(pt.At.Add(time.Hour)), Y: sum})
			}
			if err := line(p, fmt.Sprintf("%s %s", r.Fleet, ct), xys, plotutil.Color(i), k > 0); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

func queuePlot(runs []Named) (*plot.Plot, error) {
	p := newPlot("Jobs waiting (hourly)", "simulated days", "jobs queued")
	for i, r := range runs {
		var xys plotter.XYs
		for _, pt := range r.Series {
			xys = append(xys, plotter.XY{X: days(pt.At), Y: float64(pt.Queued)})
		}
		if err := line(p, r.Fleet, xys, plotutil.Color(i), false); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func utilisationPlot(runs []Named) (*plot.Plot, error) {
	p := newPlot("GPU utilisation (daily)", "simulated days", "allocated / metered GPU time")
	p.Y.Min, p.Y.Max = 0, 1
	for i, r := range runs {
		var xys plotter.XYs
		var alloc, all float64
		day := -1
		flush := func() {
			if day >= 0 && all > 0 {
				xys = append(xys, plotter.XY{X: float64(day) + 0.5, Y: alloc / all})
			}
		}
		for _, pt := range r.Series {
			if d := int(days(pt.At)); d != day {
				flush()
				day, alloc, all = d, 0, 0
			}
			alloc += pt.AllocatedGPUHours
			all += pt.MeteredGPUHours
		}
		flush()
		if err := line(p, r.Fleet, xys, plotutil.Color(i), false); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// waitPlot: the share of started jobs that waited at most x minutes (x on
// a log scale from 1 second).
func waitPlot(runs []Named) (*plot.Plot, error) {
	p := newPlot("Queue wait CDF", "wait (minutes, log scale)", "share of jobs")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = false, false
	for i, r := range runs {
		waits := slices.Clone(r.Waits)
		slices.Sort(waits)
		n := len(waits)
		if n == 0 {
			continue
		}
		// At most 500 points: the CDF at evenly spaced ranks.
		var xys plotter.XYs
		step := max(1, n/500)
		for k := 0; k < n; k += step {
			xys = append(xys, plotter.XY{X: math.Max(waits[k].Minutes(), 1.0/60), Y: float64(k+1) / float64(n)})
		}
		xys = append(xys, plotter.XY{X: math.Max(waits[n-1].Minutes(), 1.0/60), Y: 1})
		if err := line(p, r.Fleet, xys, plotutil.Color(i), false); err != nil {
			return nil, err
		}
	}
	p.Legend.Padding = vg.Points(2)
	return p, nil
}
