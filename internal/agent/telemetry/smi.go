package telemetry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/clock"
)

// smiQuery is what the nvidia-smi source asks for, in this order, and the
// field each column fills (uuid and index are the GPU's identity). The
// throttle column uses the name every driver still accepts; newer ones call
// it clocks_event_reasons.active.
var smiQuery = []struct {
	name  string
	field Field
	scale float64
}{
	{"uuid", NumFields, 0},
	{"index", NumFields, 0},
	{"utilization.gpu", GPUUtil, 1},
	{"utilization.memory", MemCopyUtil, 1},
	{"memory.used", FBUsed, 1},
	{"memory.total", FBTotal, 1},
	{"power.draw", Power, 1},
	{"temperature.gpu", Temp, 1},
	{"clocks.sm", SMClock, 1},
	{"clocks.mem", MemClock, 1},
	{"clocks_throttle_reasons.active", ThrottleReasons, 1},
}

// smiFields is what nvidia-smi --query-gpu can give.
var smiFields = func() FieldSet {
	var s FieldSet
	for _, q := range smiQuery {
		if q.field < NumFields {
			s |= 1 << q.field
		}
	}
	return s
}()

// SMIOptions configures the nvidia-smi source. The zero value runs
// nvidia-smi from PATH on the real clock.
type SMIOptions struct {
	// Program is the nvidia-smi to run; empty means "nvidia-smi".
	Program string
	// Run runs a command and returns its standard output; nil runs it.
	// Tests replay recorded outputs through it.
	Run func(ctx context.Context, program string, args ...string) ([]byte, error)
	// Clock stamps samples; nil is the wall clock.
	Clock clock.Clock
}

// SMI samples GPUs with `nvidia-smi --query-gpu`: one process per sample,
// so it costs tens of milliseconds of CPU — fine every few seconds, and the
// reason NVML is preferred. It cannot give the DCGM profiling ratios
// (SM active, occupancy, tensor, DRAM), PCIe or NVLink traffic, or XIDs.
type SMI struct {
	opts SMIOptions
	args []string
}

var _ Source = (*SMI)(nil)

// NewSMI returns an nvidia-smi source. It runs nothing until Sample.
func NewSMI(opts SMIOptions) *SMI {
	if opts.Program == "" {
		opts.Program = "nvidia-smi"
	}
	if opts.Run == nil {
		opts.Run = runCommand
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	names := make([]string, len(smiQuery))
	for i, q := range smiQuery {
		names[i] = q.name
	}
	return &SMI{opts: opts, args: []string{"--query-gpu=" + strings.Join(names, ","), "--format=csv,noheader,nounits"}}
}

// Name returns "nvidia-smi".
func (s *SMI) Name() string { return SourceNvidiaSMI }

// Missing lists what nvidia-smi's query cannot give.
func (s *SMI) Missing() []Field { return (AllFields &^ smiFields).Fields() }

// Close does nothing.
func (s *SMI) Close() error { return nil }

// Sample runs nvidia-smi once.
func (s *SMI) Sample(ctx context.Context) (Sample, error) {
	out, err := s.opts.Run(ctx, s.opts.Program, s.args...)
	if err != nil {
		return Sample{}, fmt.Errorf("running %s: %w", s.opts.Program, err)
	}
	gpus, err := ParseSMI(out)
	if err != nil {
		return Sample{}, fmt.Errorf("reading %s output: %w", s.opts.Program, err)
	}
	return Sample{Time: s.opts.Clock.Now(), GPUs: gpus}, nil
}

// ErrNoDevices is nvidia-smi's answer on a machine with the tool but no GPU.
var ErrNoDevices = errors.New("no GPU found")

// runCommand runs program and returns its standard output; a failure
// carries the first line of its standard error.
func runCommand(ctx context.Context, program string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, program, args...).Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		if bytes.Contains(out, []byte("No devices were found")) || bytes.Contains(stderr, []byte("No devices were found")) {
			return nil, ErrNoDevices
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(stderr)), "\n")
		if line == "" {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s", err, line)
	}
	return out, nil
}

// ParseSMI parses the output of `nvidia-smi --query-gpu=<the source's
// fields> --format=csv,noheader,nounits`, one GPU a line. A value nvidia-smi
// cannot give ("[N/A]", "[Not Supported]", "[Unknown Error]", "ERR!", empty)
// leaves its field missing; so does one that is not a number. A line without
// the right number of columns, a missing uuid or index, or an index listed
// twice is an error naming the line. GPUs come back sorted by index.
func ParseSMI(out []byte) ([]GPUSample, error) {
	var gpus []GPUSample
	n := 0
	for line := range strings.Lines(string(out)) {
		n++
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		g, err := parseSMILine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", n, line, err)
		}
		for _, o := range gpus {
			if o.Index == g.Index {
				return nil, fmt.Errorf("line %d %q: index %d listed twice", n, line, g.Index)
			}
		}
		gpus = append(gpus, g)
	}
	slices.SortFunc(gpus, func(a, b GPUSample) int { return a.Index - b.Index })
	return gpus, nil
}

func parseSMILine(line string) (GPUSample, error) {
	var g GPUSample
	col := 0
	for cell := range strings.SplitSeq(line, ",") {
		if col >= len(smiQuery) {
			col++
			break
		}
		cell = strings.TrimSpace(cell)
		switch col {
		case 0:
			if cell == "" || strings.HasPrefix(cell, "[") {
				return GPUSample{}, fmt.Errorf("uuid %q is not a GPU UUID", cell)
			}
			g.UUID = cell
		case 1:
			i, err := strconv.Atoi(cell)
			if err != nil || i < 0 {
				return GPUSample{}, fmt.Errorf("index %q is not a GPU index", cell)
			}
			g.Index = i
		default:
			if v, ok := smiNumber(cell); ok {
				g.Set(smiQuery[col].field, v*smiQuery[col].scale)
			}
		}
		col++
	}
	if col != len(smiQuery) {
		return GPUSample{}, fmt.Errorf("%d columns, want %d", col, len(smiQuery))
	}
	return g, nil
}

// smiNumber reads one cell: a decimal number, or a hex bitmask ("0x…"),
// with any unit nvidia-smi printed despite nounits.
func smiNumber(cell string) (float64, bool) {
	if cell == "" || cell[0] == '[' {
		return 0, false
	}
	if h, ok := strings.CutPrefix(cell, "0x"); ok {
		u, err := strconv.ParseUint(h, 16, 64)
		if err != nil {
			return 0, false
		}
		return float64(u), true
	}
	if i := strings.IndexByte(cell, ' '); i > 0 {
		cell = cell[:i] // "250.1 W", "81559 MiB"
	}
	v, err := strconv.ParseFloat(cell, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}
