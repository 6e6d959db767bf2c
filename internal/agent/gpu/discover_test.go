package gpu_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agent/gpu"
	"github.com/gpufleet/gpufleet/internal/model"
)

// fakeNvidiaSMI writes a stand-in for nvidia-smi that prints query for
// --query-gpu and topo for `topo -m`, or fails with status and message.
func fakeNvidiaSMI(t *testing.T, query, topo string) string {
	t.Helper()
	abs := func(name string) string {
		p, err := filepath.Abs(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	script := "#!/bin/sh\ncase \"$1\" in\n" +
		"topo) cat '" + abs(topo) + "' ;;\n" +
		"*) cat '" + abs(query) + "' ;;\nesac\n"
	return writeScript(t, script)
}

// writeScript writes an executable script. The tests that write and run
// scripts do not run in parallel: a fork by another test while the file is
// still open for writing keeps it busy, and running it fails with "text
// file busy" (ETXTBSY; golang/go#22315).
func writeScript(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nvidia-smi")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDiscoverWithNvidiaSMI(t *testing.T) {
	smi := fakeNvidiaSMI(t, "a100x4-pcie-bridged-query.csv", "a100x4-pcie-bridged-topo.txt")
	got, err := gpu.Discover(context.Background(), gpu.Options{NvidiaSMI: smi})
	if err != nil {
		t.Fatal(err)
	}
	mem := 81920 * model.MiB
	want := gpu.Inventory{Source: gpu.SourceNvidiaSMI, GPUs: []model.GPU{
		{Index: 0, UUID: "GPU-11111111-2222-4333-8444-555555555555", Model: "A100-80GB", Memory: mem, NVLinkGroup: 0},
		{Index: 1, UUID: "GPU-22222222-3333-4444-8555-666666666666", Model: "A100-80GB", Memory: mem, NVLinkGroup: 0},
		{Index: 2, UUID: "GPU-33333333-4444-4555-8666-777777777777", Model: "A100-80GB", Memory: mem, NVLinkGroup: 1},
		{Index: 3, UUID: "GPU-44444444-5555-4666-8777-888888888888", Model: "A100-80GB", Memory: mem, NVLinkGroup: 1},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Discover (-want +got):\n%s", diff)
	}
}

func TestDiscoverWithoutTopologyAssumesPCIe(t *testing.T) {
	smi := writeScript(t, "#!/bin/sh\n[ \"$1\" = topo ] && exit 1\necho '0, GPU-x, NVIDIA L4, 23034'\n")
	got, err := gpu.Discover(context.Background(), gpu.Options{NvidiaSMI: smi})
	if err != nil {
		t.Fatal(err)
	}
	want := gpu.Inventory{Source: gpu.SourceNvidiaSMI, GPUs: []model.GPU{
		{Index: 0, UUID: "GPU-x", Model: "L4", Memory: 23034 * model.MiB, NVLinkGroup: -1},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Discover (-want +got):\n%s", diff)
	}
}

func TestDiscoverNvidiaSMIFailures(t *testing.T) {
	tests := map[string]struct {
		script  string
		want    gpu.Inventory
		wantErr string
	}{
		"no devices": {
			script: "#!/bin/sh\necho 'No devices were found'\nexit 6\n",
			want:   gpu.Inventory{Source: gpu.SourceNone},
		},
		"driver not loaded": {
			script:  "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\" >&2\nexit 9\n",
			wantErr: "exit status 9: NVIDIA-SMI has failed",
		},
		"malformed output": {
			script:  "#!/bin/sh\necho '0, GPU-x, NVIDIA L4'\n",
			wantErr: `line 1 "0, GPU-x, NVIDIA L4": 3 fields`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := gpu.Discover(context.Background(), gpu.Options{NvidiaSMI: writeScript(t, tc.script)})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Discover error = %v; want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Discover (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiscoverFake(t *testing.T) {
	got, err := gpu.Discover(context.Background(), gpu.Options{Fake: "2xT4", MemoryOf: catalog})
	if err != nil {
		t.Fatal(err)
	}
	want := gpu.Inventory{Source: gpu.SourceFake, GPUs: fakeGPUs(2, "T4", 16*model.GiB)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Discover (-want +got):\n%s", diff)
	}
	if _, err := gpu.Discover(context.Background(), gpu.Options{Fake: "2xB9000", MemoryOf: catalog}); err == nil {
		t.Error("Discover with an unknown fake model succeeded")
	}
}

// TestDiscoverWithoutGPUs runs where there is no nvidia-smi in PATH (and, in
// the default build, no NVML): no GPUs is an answer, not an error.
func TestDiscoverWithoutGPUs(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	got, err := gpu.Discover(context.Background(), gpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(gpu.Inventory{Source: gpu.SourceNone}, got); diff != "" {
		t.Errorf("Discover (-want +got):\n%s", diff)
	}
}

func TestDiscoverNamedNvidiaSMIMissingIsAnError(t *testing.T) {
	_, err := gpu.Discover(context.Background(), gpu.Options{NvidiaSMI: filepath.Join(t.TempDir(), "nvidia-smi")})
	if err == nil {
		t.Fatal("Discover with a missing named nvidia-smi succeeded")
	}
}
