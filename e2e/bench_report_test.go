package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/renameio/v2"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// benchFile is bench/results.json.
type benchFile struct {
	Metrics map[string]any     `json:"metrics"`
	Ratios  map[string]float64 `json:"ratios"`
	Machine map[string]any     `json:"machine"`
	Notes   []string           `json:"notes,omitempty"`
	When    time.Time          `json:"when"`
}

// runScenarios are plotted, in this order, when measured.
var runScenarios = []string{
	"vmm_floor", "vmm_floor_minimal_kernel", "run_cold", "run_template", "run_shape_template", "run_template_minimal_kernel",
	"run_pool", "run_runc",
	"run_template_nonet", "run_runc_nonet",
	"first_output_cold", "first_output_template", "first_output_restore",
	"first_exec_cold", "first_exec_template", "first_exec_restore",
}

// write puts results.json and latency.png in dir, each atomically.
func (b *benchResults) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f := benchFile{Metrics: map[string]any{}, Ratios: b.ratios, Machine: b.machine, Notes: b.notes, When: time.Now().UTC()}
	for _, k := range b.order {
		f.Metrics[k] = b.stats(k)
	}
	for k, m := range b.memory {
		f.Metrics["sandbox_memory_"+k] = m
	}
	j, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := renameio.WriteFile(filepath.Join(dir, "results.json"), append(j, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results.json: %w", err)
	}
	return b.plot(filepath.Join(dir, "latency.png"))
}

// plot draws a box per run scenario (median, quartiles, whiskers at the
// extremes within 1.5 IQR, outliers as points).
func (b *benchResults) plot(path string) error {
	p := plot.New()
	p.Title.Text = "husk: start latencies (seconds, TCG, 2 cores)"
	p.Y.Label.Text = "seconds"
	var names []string
	w := vg.Points(18)
	for _, k := range runScenarios {
		st := b.stats(k)
		if st.N == 0 {
			continue
		}
		box, err := plotter.NewBoxPlot(w, float64(len(names)), plotter.Values(st.Samples))
		if err != nil {
			return fmt.Errorf("plot %s: %w", k, err)
		}
		p.Add(box)
		names = append(names, k)
	}
	p.NominalX(names...)
	p.Y.Min = 0
	wt, err := p.WriterTo(vg.Points(float64(90*len(names)+120)), 5*vg.Inch, "png")
	if err != nil {
		return fmt.Errorf("render plot: %w", err)
	}
	tmp, err := renameio.TempFile("", path)
	if err != nil {
		return err
	}
	defer tmp.Cleanup()
	if _, err := wt.WriteTo(tmp); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return tmp.CloseAtomicallyReplace()
}
