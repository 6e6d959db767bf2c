package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// maxMiB bounds a reported memory size so that it fits model.Bytes.
const maxMiB = 1 << 40

// discoverNvidiaSMI lists the GPUs with `nvidia-smi --query-gpu` and their
// NVLink groups with `nvidia-smi topo -m`. program empty means nvidia-smi
// from PATH, and none there is no GPUs.
func discoverNvidiaSMI(ctx context.Context, program string, log *slog.Logger) (Inventory, error) {
	if program == "" {
		p, err := exec.LookPath("nvidia-smi")
		if err != nil {
			return Inventory{Source: SourceNone}, nil
		}
		program = p
	}
	out, err := exec.CommandContext(ctx, program, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits").Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		// nvidia-smi installed on a machine without GPUs says so and fails.
		if bytes.Contains(out, []byte("No devices were found")) || bytes.Contains(stderr, []byte("No devices were found")) {
			return Inventory{Source: SourceNone}, nil
		}
		return Inventory{}, fmt.Errorf("running %s: %w: %s", program, err, firstLine(stderr, out))
	}
	gpus, err := parseQuery(out)
	if err != nil {
		return Inventory{}, fmt.Errorf("reading the GPU list from %s: %w", program, err)
	}
	topo, err := exec.CommandContext(ctx, program, "topo", "-m").Output()
	if err != nil {
		log.Warn("reading NVLink topology; treating GPUs as PCIe only", "program", program, "err", err)
		return Inventory{GPUs: gpus, Source: SourceNvidiaSMI}, nil
	}
	names := make([]string, len(gpus))
	for i, g := range gpus {
		names[i] = "GPU" + strconv.Itoa(g.Index)
	}
	for i, g := range nvlinkGroups(names, parseTopology(topo)) {
		gpus[i].NVLinkGroup = g
	}
	return Inventory{GPUs: gpus, Source: SourceNvidiaSMI}, nil
}

// firstLine returns the first non-empty line of the first output that has
// one, for an error message.
func firstLine(outputs ...[]byte) string {
	for _, o := range outputs {
		for line := range strings.Lines(string(o)) {
			if l := strings.TrimSpace(line); l != "" {
				return l
			}
		}
	}
	return "no output"
}

// parseQuery parses the output of `nvidia-smi
// --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`:
// one GPU a line, memory in MiB. GPUs come back sorted by index, with
// NVLinkGroup -1. Any line it cannot read is an error naming the line.
func parseQuery(out []byte) ([]model.GPU, error) {
	var gpus []model.GPU
	seen := map[int]bool{}
	n := 0
	for line := range strings.Lines(string(out)) {
		n++
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		g, err := parseQueryLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", n, line, err)
		}
		if seen[g.Index] {
			return nil, fmt.Errorf("line %d %q: index %d listed twice", n, line, g.Index)
		}
		seen[g.Index] = true
		gpus = append(gpus, g)
	}
	slices.SortFunc(gpus, func(a, b model.GPU) int { return a.Index - b.Index })
	return gpus, nil
}

func parseQueryLine(line string) (model.GPU, error) {
	f := strings.Split(line, ",")
	if len(f) != 4 {
		return model.GPU{}, fmt.Errorf("%d fields, want 4 (index, uuid, name, memory.total)", len(f))
	}
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	index, err := strconv.Atoi(f[0])
	if err != nil || index < 0 {
		return model.GPU{}, fmt.Errorf("index %q is not a GPU index", f[0])
	}
	if f[1] == "" || f[2] == "" {
		return model.GPU{}, errors.New("empty uuid or name")
	}
	mib, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil || mib < 0 || mib > maxMiB {
		return model.GPU{}, fmt.Errorf("memory.total %q is not a size in MiB", f[3])
	}
	memory := model.Bytes(mib) * model.MiB
	return model.GPU{Index: index, UUID: f[1], Model: CatalogName(f[2], memory), Memory: memory, NVLinkGroup: -1}, nil
}

// parseTopology reads the matrix of `nvidia-smi topo -m` and returns the
// pairs of GPUs ("GPU0", "GPU3") whose cell is an NVLink connection ("NV#").
// The header is the first line that starts with a GPU column name and is not
// GPU0's own row (whose first cell is "X"); columns past the GPU and NIC ones
// (CPU Affinity, …) and lines it does not understand are ignored, as are
// terminal escape sequences some versions print around the header.
func parseTopology(out []byte) [][2]string {
	var cols []string
	var links [][2]string
	for line := range strings.Lines(stripEscapes(string(out))) {
		f := strings.Fields(line)
		if len(f) == 0 || !isDevice(f[0], "GPU") {
			if cols != nil && len(f) > 0 && strings.HasPrefix(f[0], "Legend") {
				break
			}
			continue
		}
		if cols == nil {
			if len(f) > 1 && f[1] == "X" {
				continue // a row before any header: not a matrix we know
			}
			for _, c := range f {
				if !isDevice(c, "GPU") && !isDevice(c, "NIC") {
					break
				}
				cols = append(cols, c)
			}
			continue
		}
		for j, cell := range f[1:] {
			if j >= len(cols) {
				break
			}
			if isDevice(cols[j], "GPU") && cols[j] != f[0] && strings.HasPrefix(cell, "NV") {
				links = append(links, [2]string{f[0], cols[j]})
			}
		}
	}
	return links
}

// isDevice reports whether s is kind followed by a number ("GPU3").
func isDevice(s, kind string) bool {
	n, ok := strings.CutPrefix(s, kind)
	if !ok || n == "" {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// stripEscapes removes ANSI CSI sequences (ESC [ … final byte).
func stripEscapes(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != 0x1b {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '[' {
			i += 2
			for i < len(s) && (s[i] < 0x40 || s[i] > 0x7e) {
				i++
			}
		}
	}
	return b.String()
}

// QueryArgs are the nvidia-smi arguments whose output ParseQuery reads.
var QueryArgs = []string{"--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"}

// ParseQuery parses the output of nvidia-smi run with QueryArgs (for
// probes that run it elsewhere, such as over SSH).
func ParseQuery(out []byte) ([]model.GPU, error) { return parseQuery(out) }
