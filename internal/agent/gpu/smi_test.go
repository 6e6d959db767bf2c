package gpu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseQuery(t *testing.T) {
	t.Parallel()
	h100 := func(i int, uuid string) model.GPU {
		return model.GPU{Index: i, UUID: uuid, Model: "H100", Memory: 81559 * model.MiB, NVLinkGroup: -1}
	}
	tests := map[string]struct {
		file    string
		want    []model.GPU
		wantErr string
	}{
		"8xH100 SXM": {file: "h100x8-query.csv", want: []model.GPU{
			h100(0, "GPU-3b5e6f2a-8c1d-4e7f-9a2b-1c3d5e7f9a0b"),
			h100(1, "GPU-7c9d0e1f-2a3b-4c5d-8e6f-7a8b9c0d1e2f"),
			h100(2, "GPU-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"),
			h100(3, "GPU-0f1e2d3c-4b5a-4968-8776-655443322110"),
			h100(4, "GPU-5d6c7b8a-9e0f-4a1b-b2c3-d4e5f6a7b8c9"),
			h100(5, "GPU-c0ffee00-1234-4567-89ab-cdef01234567"),
			h100(6, "GPU-9e8d7c6b-5a49-4837-a261-50f4e3d2c1b0"),
			h100(7, "GPU-2468ace0-1357-49bd-8f02-468ace13579b"),
		}},
		"1xT4": {file: "t4x1-query.csv", want: []model.GPU{
			{Index: 0, UUID: "GPU-8f2e4c6a-0b1d-3f5e-7a9c-2e4f6a8c0e1b", Model: "T4", Memory: 15360 * model.MiB, NVLinkGroup: -1},
		}},
		"malformed memory": {file: "malformed-query.csv", wantErr: `line 2 "1, GPU-7c9d0e1f-2a3b-4c5d-8e6f-7a8b9c0d1e2f, NVIDIA H100 80GB HBM3, [N/A]": memory.total "[N/A]" is not a size in MiB`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseQuery(readTestdata(t, tc.file))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("parseQuery error = %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseQuery (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseQueryRejects(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"too few fields":   "0, GPU-x, NVIDIA L4\n",
		"index not number": "a, GPU-x, NVIDIA L4, 23034\n",
		"negative memory":  "0, GPU-x, NVIDIA L4, -1\n",
		"empty uuid":       "0, , NVIDIA L4, 23034\n",
		"duplicate index":  "0, GPU-x, NVIDIA L4, 23034\n0, GPU-y, NVIDIA L4, 23034\n",
	}
	for name, in := range tests {
		if got, err := parseQuery([]byte(in)); err == nil {
			t.Errorf("%s: parseQuery(%q) = %v, nil; want an error", name, in, got)
		}
	}
}

func TestParseTopologyGroups(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		file string
		gpus int
		want []int
	}{
		"8xH100 NVSwitch, escapes in header": {file: "h100x8-topo.txt", gpus: 8, want: []int{0, 0, 0, 0, 0, 0, 0, 0}},
		"1xT4 PCIe":                          {file: "t4x1-topo.txt", gpus: 1, want: []int{-1}},
		"4xA100 PCIe with NVLink bridges":    {file: "a100x4-pcie-bridged-topo.txt", gpus: 4, want: []int{0, 0, 1, 1}},
		"not a matrix":                       {file: "t4x1-query.csv", gpus: 1, want: []int{-1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			names := make([]string, tc.gpus)
			for i := range names {
				names[i] = "GPU" + strconv.Itoa(i)
			}
			got := nvlinkGroups(names, parseTopology(readTestdata(t, tc.file)))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("groups (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNVLinkGroupsThroughSwitches(t *testing.T) {
	t.Parallel()
	// As NVML reports it: GPUs by bus id, links to NVSwitches or peers.
	gpus := []string{"gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e"}
	links := [][2]string{
		{"gpu-a", "switch-1"}, {"gpu-a", "switch-2"},
		{"gpu-c", "switch-2"},
		{"gpu-d", "gpu-e"}, {"gpu-e", "gpu-d"},
	}
	if diff := cmp.Diff([]int{0, -1, 0, 1, 1}, nvlinkGroups(gpus, links)); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
}

func TestStripEscapes(t *testing.T) {
	t.Parallel()
	if got := stripEscapes("\t\x1b[4mGPU0\x1b[0m\tX\x1b"); got != "\tGPU0\tX" {
		t.Errorf("stripEscapes = %q", got)
	}
}

func FuzzParseQuery(f *testing.F) {
	for _, name := range []string{"h100x8-query.csv", "t4x1-query.csv", "malformed-query.csv"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("0, GPU-x, NVIDIA A100-SXM4-40GB, 99999999999999999999\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		gpus, err := parseQuery(data)
		if err != nil {
			return
		}
		if n := strings.Count(string(data), "\n") + 1; len(gpus) > n {
			t.Fatalf("%d GPUs from %d lines", len(gpus), n)
		}
		for i, g := range gpus {
			if g.Memory < 0 || g.UUID == "" || (i > 0 && g.Index <= gpus[i-1].Index) {
				t.Fatalf("bad GPU %+v at %d", g, i)
			}
		}
	})
}

func FuzzParseTopology(f *testing.F) {
	for _, name := range []string{"h100x8-topo.txt", "t4x1-topo.txt", "a100x4-pcie-bridged-topo.txt"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		names := []string{"GPU0", "GPU1", "GPU2", "GPU3"}
		groups := nvlinkGroups(names, parseTopology(data))
		if len(groups) != len(names) {
			t.Fatalf("%d groups for %d GPUs", len(groups), len(names))
		}
	})
}
