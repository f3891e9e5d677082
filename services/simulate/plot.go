package simulate

import (
	"fmt"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// cdfPoints is how many points of each TTFT distribution the plot draws.
const cdfPoints = 200

// plots writes hit_rate.png (block hit rate per policy against the two references) and
// ttft_cdf.png (the TTFT distribution of each policy) in dir.
func (r *Report) plots(dir string) error {
	if len(r.Policies) == 0 {
		return nil
	}
	hit := plot.New()
	hit.Title.Text = "Block hit rate"
	hit.Y.Label.Text = "hit rate"
	vals := make(plotter.Values, len(r.Policies))
	names := make([]string, len(r.Policies))
	for i, p := range r.Policies {
		vals[i], names[i] = p.BlockHitRate, p.Policy
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(30))
	if err != nil {
		return err
	}
	bars.Color = plotutil.Color(0)
	hit.Add(bars)
	hit.NominalX(names...)
	for i, ref := range []struct {
		name string
		v    float64
	}{{"pooled LRU", r.Bounds.PooledLRU}, {"infinite cache", r.Bounds.Infinite}} {
		line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: ref.v}, {X: float64(len(r.Policies)) - 0.5, Y: ref.v}})
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i + 1)
		line.Dashes = plotutil.Dashes(i + 1)
		hit.Add(line)
		hit.Legend.Add(fmt.Sprintf("%s %.3f", ref.name, ref.v), line)
	}
	hit.Legend.Top = true
	hit.Y.Min = 0
	if err := hit.Save(vg.Length(max(4, 1.6*float64(len(r.Policies))))*vg.Inch, 4*vg.Inch, filepath.Join(dir, "hit_rate.png")); err != nil {
		return err
	}

	cdf := plot.New()
	cdf.Title.Text = "TTFT distribution"
	cdf.X.Label.Text = "TTFT (ms, log)"
	cdf.Y.Label.Text = "fraction of requests"
	cdf.X.Scale = plot.LogScale{}
	cdf.X.Tick.Marker = plot.LogTicks{Prec: -1}
	for i, p := range r.Policies {
		pts := cdfXYs(p.ttfts)
		if len(pts) == 0 {
			continue
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i)
		cdf.Add(line)
		cdf.Legend.Add(p.Policy, line)
	}
	cdf.Legend.Left, cdf.Legend.Top = true, true
	cdf.Add(plotter.NewGrid())
	return cdf.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, "ttft_cdf.png"))
}

// cdfXYs samples the empirical CDF of sorted durations at cdfPoints quantiles, in ms, floored
// at 0.1 ms for the log axis.
func cdfXYs(sorted []time.Duration) plotter.XYs {
	n := len(sorted)
	if n == 0 {
		return nil
	}
	pts := make(plotter.XYs, 0, cdfPoints+1)
	for k := 0; k <= cdfPoints; k++ {
		i := min(n-1, k*(n-1)/cdfPoints)
		ms := max(float64(sorted[i])/float64(time.Millisecond), 0.1)
		pts = append(pts, plotter.XY{X: ms, Y: float64(i+1) / float64(n)})
	}
	return pts
}
