package server

import (
	"strings"
	"testing"
	"time"
)

// TestStoreFlag: --store takes sqlite or a postgres:// URL; a refusal never
// echoes a password; --accept-lost-writes is SQLite's.
func TestStoreFlag(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		store      string
		acceptLost bool
		want       string // a substring of the error; "": valid
		describe   string
	}{
		"default":            {store: "", describe: "sqlite:/d/gpufleet.db"},
		"sqlite":             {store: "sqlite", describe: "sqlite:/d/gpufleet.db"},
		"postgres":           {store: "postgres://gf:hunter2@db:5432/fleet", describe: "postgres://gf:xxxxx@db:5432/fleet"},
		"postgresql":         {store: "postgresql://db/fleet?password=hunter2", describe: "postgresql://db/fleet?password=xxxxx"},
		"other url":          {store: "mysql://root:hunter2@db/fleet", want: "--store: must be sqlite (the data dir's database, the default) or a postgres:// URL, not mysql://root:xxxxx@db/fleet"},
		"a path":             {store: "/var/lib/x.db", want: "--store: must be sqlite"},
		"lost writes on pg":  {store: "postgres://db/fleet", acceptLost: true, want: "--accept-lost-writes: applies to the SQLite store only"},
		"lost writes on sql": {store: "sqlite", acceptLost: true, describe: "sqlite:/d/gpufleet.db"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := &Config{DataDir: "/d", Listen: "127.0.0.1:0", LogLevel: "info", HeartbeatTimeout: time.Minute, MeterInterval: time.Minute,
				Store: tc.store, AcceptLostWrites: tc.acceptLost}
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "hunter2"):
				t.Fatalf("Validate echoes the password: %v", err)
			}
			if tc.describe != "" {
				if got := describeStore(c); got != tc.describe {
					t.Errorf("describeStore = %q, want %q", got, tc.describe)
				}
			}
		})
	}
}
