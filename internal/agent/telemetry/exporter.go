package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/clock"
)

// DefaultExporterURL is where dcgm-exporter listens by default.
const DefaultExporterURL = "http://localhost:9400/metrics"

// maxExposition bounds what the exporter source reads from one scrape: a
// node's DCGM metrics are tens of kilobytes.
const maxExposition = 8 << 20

// ExporterOptions configures the dcgm-exporter source. The zero value reads
// DefaultExporterURL with http.DefaultClient on the real clock.
type ExporterOptions struct {
	URL    string
	Client *http.Client
	Clock  clock.Clock
}

// Exporter reads a running dcgm-exporter's /metrics. What it gives depends
// on the counters the exporter was configured with; Missing reports the
// fields absent from the last scrape. Series of MIG instances (with a
// GPU_I_ID label) are skipped: telemetry here is per physical GPU.
type Exporter struct {
	opts    ExporterOptions
	present FieldSet
}

var _ Source = (*Exporter)(nil)

// NewExporter returns a dcgm-exporter source. It fetches nothing until
// Sample.
func NewExporter(opts ExporterOptions) *Exporter {
	if opts.URL == "" {
		opts.URL = DefaultExporterURL
	}
	if opts.Client == nil {
		opts.Client = http.DefaultClient
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	return &Exporter{opts: opts}
}

// Name returns "dcgm-exporter".
func (e *Exporter) Name() string { return SourceDCGMExporter }

// Missing lists the fields the last scrape lacked on every GPU (all of
// them before the first scrape).
func (e *Exporter) Missing() []Field { return (AllFields &^ e.present).Fields() }

// Close does nothing.
func (e *Exporter) Close() error { return nil }

// Sample scrapes the exporter once.
func (e *Exporter) Sample(ctx context.Context) (Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.opts.URL, nil)
	if err != nil {
		return Sample{}, fmt.Errorf("scraping %s: %w", e.opts.URL, err)
	}
	resp, err := e.opts.Client.Do(req)
	if err != nil {
		return Sample{}, fmt.Errorf("scraping %s: %w", e.opts.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Sample{}, fmt.Errorf("scraping %s: %s", e.opts.URL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxExposition))
	if err != nil {
		return Sample{}, fmt.Errorf("scraping %s: %w", e.opts.URL, err)
	}
	gpus, err := ParseExposition(body)
	if err != nil {
		return Sample{}, fmt.Errorf("reading %s: %w", e.opts.URL, err)
	}
	e.present = 0
	for _, g := range gpus {
		e.present |= g.Present
	}
	return Sample{Time: e.opts.Clock.Now(), GPUs: gpus}, nil
}

// ParseExposition reads the DCGM_FI_* series of a Prometheus text
// exposition as dcgm-exporter writes it: one GPU per (gpu, UUID) label
// pair. Other metrics, comments and MIG-instance series are skipped. When
// DCGM_FI_DEV_FB_TOTAL is absent it is FB_USED + FB_FREE (+ FB_RESERVED).
// A DCGM series without a gpu index or UUID label, or a line that is not
// exposition syntax, is an error naming the line. GPUs come back sorted by
// index.
func ParseExposition(text []byte) ([]GPUSample, error) {
	var gpus []GPUSample
	var free, reserved []float64
	n := 0
	for line := range strings.Lines(string(text)) {
		n++
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "DCGM_FI_") {
			continue // comments, blank lines, other metrics
		}
		s, err := parseSeries(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if s.labels["GPU_I_ID"] != "" {
			continue
		}
		field, known := ParseField(s.name)
		if !known && s.name != "DCGM_FI_DEV_FB_FREE" && s.name != "DCGM_FI_DEV_FB_RESERVED" {
			continue
		}
		uuid := s.labels["UUID"]
		if uuid == "" {
			uuid = s.labels["uuid"]
		}
		index, err := strconv.Atoi(s.labels["gpu"])
		if uuid == "" || err != nil || index < 0 {
			return nil, fmt.Errorf("line %d: %s without gpu and UUID labels", n, s.name)
		}
		i := slices.IndexFunc(gpus, func(g GPUSample) bool { return g.UUID == uuid })
		if i < 0 {
			if slices.ContainsFunc(gpus, func(g GPUSample) bool { return g.Index == index }) {
				return nil, fmt.Errorf("line %d: gpu %d has two UUIDs", n, index)
			}
			gpus = append(gpus, GPUSample{UUID: uuid, Index: index})
			free, reserved = append(free, math.NaN()), append(reserved, 0)
			i = len(gpus) - 1
		}
		switch s.name {
		case "DCGM_FI_DEV_FB_FREE":
			free[i] = s.value
		case "DCGM_FI_DEV_FB_RESERVED":
			reserved[i] = s.value
		default:
			gpus[i].Set(field, s.value)
		}
	}
	for i := range gpus {
		g := &gpus[i]
		if used, ok := g.Get(FBUsed); ok && !g.Present.Has(FBTotal) && !math.IsNaN(free[i]) {
			g.Set(FBTotal, used+free[i]+reserved[i])
		}
	}
	slices.SortFunc(gpus, func(a, b GPUSample) int { return a.Index - b.Index })
	return gpus, nil
}

type series struct {
	name   string
	labels map[string]string
	value  float64
}

var errSyntax = errors.New("not exposition syntax")

// parseSeries reads `name{l="v",…} value [timestamp]`.
func parseSeries(line string) (series, error) {
	var s series
	i := strings.IndexAny(line, "{ \t")
	if i < 0 {
		return s, fmt.Errorf("%w: no value", errSyntax)
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		s.labels = map[string]string{}
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " \t,")
			if line == "" {
				return s, fmt.Errorf("%w: unterminated labels", errSyntax)
			}
			if line[0] == '}' {
				line = line[1:]
				break
			}
			eq := strings.IndexByte(line, '=')
			if eq <= 0 || eq+1 >= len(line) || line[eq+1] != '"' {
				return s, fmt.Errorf("%w: bad label", errSyntax)
			}
			key := strings.TrimSpace(line[:eq])
			val, rest, ok := unquote(line[eq+2:])
			if !ok {
				return s, fmt.Errorf("%w: unterminated label value", errSyntax)
			}
			s.labels[key] = val
			line = rest
		}
	}
	fields := strings.Fields(line)
	if len(fields) < 1 || len(fields) > 2 {
		return s, fmt.Errorf("%w: want a value and an optional timestamp", errSyntax)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("%w: value %q", errSyntax, fields[0])
	}
	s.value = v
	return s, nil
}

// unquote reads a label value up to its closing quote, undoing \\, \" and
// \n, and returns the rest of the line after the quote.
func unquote(s string) (val, rest string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), s[i+1:], true
		case '\\':
			if i+1 >= len(s) {
				return "", "", false
			}
			i++
			if s[i] == 'n' {
				b.WriteByte('\n')
			} else {
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false
}
