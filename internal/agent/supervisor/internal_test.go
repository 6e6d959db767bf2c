package supervisor

import (
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	// Fields 3.. of a real stat line; field 5 (pgrp) is 4242 and field 22
	// (starttime) is 987654.
	const rest = " S 1 4242 4242 0 -1 4194560 3 0 0 0 0 0 0 0 20 0 1 0 987654 1234 56 18446744073709551615"
	tests := map[string]struct {
		in      string
		want    procStat
		wantErr bool
	}{
		"plain name":             {in: "77 (sleep)" + rest, want: procStat{state: 'S', pgrp: 4242, start: 987654}},
		"name with parens":       {in: "77 (a) b (c))" + rest, want: procStat{state: 'S', pgrp: 4242, start: 987654}},
		"name with spaces":       {in: "77 (tmux: server)" + rest, want: procStat{state: 'S', pgrp: 4242, start: 987654}},
		"zombie":                 {in: "77 (sh) Z 1 4242 4242 0 -1 4194560 3 0 0 0 0 0 0 0 20 0 1 0 987654 0 0 0", want: procStat{state: 'Z', pgrp: 4242, start: 987654}},
		"no name":                {in: "77 sleep S 1", wantErr: true},
		"truncated":              {in: "77 (sleep) S 1 4242", wantErr: true},
		"start time not numeric": {in: "77 (sh) S 1 4242 4242 0 -1 4194560 3 0 0 0 0 0 0 0 20 0 1 0 x 0 0", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseStat(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseStat error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(procStat{})); diff != "" {
				t.Errorf("parseStat (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSignal(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		want    syscall.Signal
		wantErr bool
	}{
		"":        {want: syscall.SIGTERM},
		"SIGTERM": {want: syscall.SIGTERM},
		"term":    {want: syscall.SIGTERM},
		"SIGUSR1": {want: syscall.SIGUSR1},
		"INT":     {want: syscall.SIGINT},
		"9":       {want: syscall.SIGKILL},
		"SIGNOPE": {wantErr: true},
		"0":       {wantErr: true},
		"65":      {wantErr: true},
	}
	for in, tc := range tests {
		got, err := parseSignal(in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseSignal(%q) = %v, %v; want %v, error %v", in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestChildEnvInheritsOnlyTheBasics(t *testing.T) {
	t.Parallel()
	host := map[string]string{"PATH": "/host/bin", "HOME": "/root", "LANG": "C.UTF-8", "AWS_SECRET_ACCESS_KEY": "x", "GPUFLEET_AGENT_TOKEN": "y"}
	lookup := func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	tests := map[string]struct {
		host func(string) (string, bool)
		spec map[string]string
		want map[string]string
	}{
		"host basics under the spec": {
			host: lookup,
			spec: map[string]string{"CUDA_VISIBLE_DEVICES": "0,1", "LANG": "en_US.UTF-8"},
			want: map[string]string{"PATH": "/host/bin", "HOME": "/root", "LANG": "en_US.UTF-8", "CUDA_VISIBLE_DEVICES": "0,1"},
		},
		"default PATH": {
			host: func(string) (string, bool) { return "", false },
			want: map[string]string{"PATH": DefaultPath},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, childEnv(tc.spec, tc.host)); diff != "" {
				t.Errorf("childEnv (-want +got):\n%s", diff)
			}
		})
	}
}
