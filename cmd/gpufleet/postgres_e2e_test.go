package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store/postgres/pgtest"
)

// TestPostgresStore: `gpufleet up` keeps its state in PostgreSQL when
// GPUFLEET_STORE (or --store) names it: a job run on one server survives
// its kill -9 and is there, finished, for the next; no SQLite file is
// written; and the DSN's password appears in no log line.
func TestPostgresStore(t *testing.T) {
	dsn := pgtest.DSN(t)
	pw := pgtest.Password(t)
	dir := t.TempDir()

	first := startServerEnv(t, []string{"GPUFLEET_STORE=" + dsn}, dir, freePort(t), "--log-level", "debug")
	id := strings.TrimSpace(first.gpufleet("run", "--gpus", "1", "--", "sh", "-c", "echo hello from postgres"))
	first.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	first.kill() // SIGKILL: nothing is flushed on the way out
	if _, err := os.Stat(filepath.Join(dir, dbFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the data dir has %s (%v): the server wrote SQLite, not PostgreSQL", dbFile, err)
	}

	second := startServer(t, dir, freePort(t), "--store", dsn, "--log-level", "debug")
	if v := second.job(id); v.State != model.JobSucceeded {
		t.Errorf("after a restart on the same database, job %s is %s, want succeeded", id, v.State)
	}
	if got := second.gpufleet("jobs", "logs", id); got != "hello from postgres\n" {
		t.Errorf("logs = %q", got)
	}
	second.kill()

	for name, out := range map[string]string{"first": first.out.String(), "second": second.out.String()} {
		if strings.Contains(out, pw) {
			t.Errorf("the %s server's log holds the database password:\n%s", name, out)
		}
		if !strings.Contains(out, "postgres://gpufleet:xxxxx@127.0.0.1") {
			t.Errorf("the %s server's log does not name its store (password masked):\n%s", name, out)
		}
	}
}

// TestStoreFlagRefusesOtherURLs: --store takes sqlite or postgres:// only,
// and its error masks the password of what it refuses.
func TestStoreFlagRefusesOtherURLs(t *testing.T) {
	out, err := (&serverProc{t: t, dataDir: t.TempDir()}).gpufleetErr("up", "--store", "mysql://root:Sekr1t@db/fleet", "--listen", freePort(t))
	if err == nil {
		t.Fatalf("up with a mysql store started:\n%s", out)
	}
	if !strings.Contains(out, "--store: must be sqlite") || strings.Contains(out, "Sekr1t") {
		t.Errorf("up said:\n%s\nwant a --store error without the password", out)
	}
}
