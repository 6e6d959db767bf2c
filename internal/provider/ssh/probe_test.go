package ssh

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestParseProbe(t *testing.T) {
	tests := map[string]struct {
		out     string
		want    Facts
		wantErr string
	}{
		"cpu only, systemd": {
			out:  "hostname gpu-a\nuname Linux aarch64\ncpus 16\nmemkb 1024\nsystemd yes\ngpus none\n",
			want: Facts{Hostname: "gpu-a", Arch: "arm64", CPU: 16, Memory: 1024 * model.KiB, Systemd: true},
		},
		"one GPU": {
			out: "hostname b\nuname Linux x86_64\ncpus 8\nmemkb 2048\nsystemd no\ngpus ok\ngpu 0, GPU-1, NVIDIA L4, 23034\n",
			want: Facts{Hostname: "b", Arch: "amd64", CPU: 8, Memory: 2048 * model.KiB,
				GPUs: []model.GPU{{Index: 0, UUID: "GPU-1", Model: "L4", Memory: 23034 * model.MiB, NVLinkGroup: -1}}},
		},
		"not linux":        {out: "uname Darwin arm64\n", wantErr: "the agent runs on Linux"},
		"bad cpus":         {out: "cpus many\n", wantErr: "cpu count"},
		"bad nvidia-smi":   {out: "gpus ok\ngpu 0, GPU-1\n", wantErr: "reading nvidia-smi"},
		"nvidia-smi error": {out: "gpus none\ngpuerr NVIDIA-SMI has failed\n", want: Facts{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseProbe([]byte(tc.out))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseProbe error = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("facts (-want +got):\n%s", diff)
			}
		})
	}
}
