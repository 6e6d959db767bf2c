package agent

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := Config{Dir: "/var/lib/gpufleet/agent", ControlPlane: newFakeControlPlane(), SupervisorCommand: []string{"/usr/bin/gpufleet", "supervise", "--dir"}}
	tests := map[string]struct {
		edit func(*Config)
		want string
	}{
		"valid": {edit: func(*Config) {}},
		"zero": {
			edit: func(c *Config) { *c = Config{} },
			want: "controlPlane: is required; dir: is required; supervisorCommand: is required",
		},
		"empty program": {
			edit: func(c *Config) { c.SupervisorCommand = []string{""} },
			want: "supervisorCommand[0]: must name a program",
		},
		"negative values": {
			edit: func(c *Config) {
				c.SyncWait, c.PollInterval, c.StartTimeout, c.LogChunkSize = -1, -1, -1, -1
			},
			want: "logChunkSize: must not be negative; pollInterval: must not be negative; startTimeout: must not be negative; syncWait: must not be negative",
		},
		"backoff cap below start": {
			edit: func(c *Config) { c.RetryBackoff, c.MaxRetryBackoff = time.Minute, time.Second },
			want: "maxRetryBackoff: must not be less than retryBackoff",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := valid
			tc.edit(&c)
			got := ""
			if err := c.Validate(); err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Validate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewFillsDefaults(t *testing.T) {
	t.Parallel()
	a, err := New(Config{Dir: "relative/agent", ControlPlane: newFakeControlPlane(), SupervisorCommand: []string{"gpufleet"}, RetryBackoff: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c := a.cfg
	if c.Clock == nil || c.Logger == nil || c.SyncWait != 10*time.Second || c.LogChunkSize != 256<<10 ||
		c.PollInterval != time.Second || c.StartTimeout != 30*time.Second || c.MaxRetryBackoff != time.Minute {
		t.Errorf("defaults not applied: %+v", c)
	}
	if c.Dir[0] != '/' {
		t.Errorf("Dir = %q; want it absolute", c.Dir)
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New(Config{}) succeeded")
	}
}
