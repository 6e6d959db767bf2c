package main

import (
	"encoding/json"
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
	flags := []string{"--log-level", "debug", "--work-root", workRoot(t)}

	first := startServerEnv(t, []string{"GPUFLEET_STORE=" + dsn}, dir, freePort(t), flags...)
	id := strings.TrimSpace(first.gpufleet("run", "--gpus", "1", "--", "sh", "-c", "echo hello from postgres"))
	first.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	first.kill() // SIGKILL: nothing is flushed on the way out
	if _, err := os.Stat(filepath.Join(dir, dbFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the data dir has %s (%v): the server wrote SQLite, not PostgreSQL", dbFile, err)
	}

	second := startServer(t, dir, freePort(t), append([]string{"--store", dsn}, flags...)...)
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

// workRoot is a work root of the test's own, which workload users can pass
// through, whatever the machine's default (/var/lib/gpufleet) is.
func workRoot(t *testing.T) string {
	t.Helper()
	work, err := os.MkdirTemp("", "gpufleet-pg-work-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chmod(work, 0o711); err != nil {
		t.Fatal(err)
	}
	return work
}

// TestStoreMigrateAndBackup: a SQLite data dir is backed up while its
// server runs, then copied into PostgreSQL with `store migrate`; a server
// on the copy has the job, accepts the same admin token, and its audit
// chain verifies, continued by the new server's own entries.
func TestStoreMigrateAndBackup(t *testing.T) {
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	work := workRoot(t)
	s := startServer(t, dir, freePort(t), "--work-root", work)
	id := strings.TrimSpace(s.gpufleet("run", "--gpus", "0", "--", "sh", "-c", "echo migrated"))
	s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	backup := filepath.Join(t.TempDir(), "backup.db")
	if out := s.gpufleet("store", "backup", backup); !strings.Contains(out, "backed up commit #") {
		t.Errorf("store backup said %q", out)
	}
	if out, err := s.gpufleetErr("store", "migrate", "--to", dsn); err == nil || !strings.Contains(out, "in use by another gpufleet server") {
		t.Errorf("store migrate beside a running server: %v\n%s\nwant it refused", err, out)
	}
	s.kill()

	out := s.gpufleet("store", "migrate", "--to", dsn, "-o", "json")
	var rep struct {
		Tables []struct {
			Table          string
			Source, Target int64
		}
		AuditEntries int
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("store migrate -o json: %v\n%s", err, out)
	}
	counts := map[string]int64{}
	for _, tc := range rep.Tables {
		if tc.Source != tc.Target {
			t.Errorf("table %s: %d rows in SQLite, %d in PostgreSQL", tc.Table, tc.Source, tc.Target)
		}
		counts[tc.Table] = tc.Target
	}
	if counts["jobs"] != 1 || counts["tokens"] == 0 || rep.AuditEntries == 0 {
		t.Errorf("migrated %v and %d audit entries; want the job, the tokens and the audit log", counts, rep.AuditEntries)
	}

	pg := startServer(t, dir, freePort(t), "--store", dsn, "--work-root", work)
	if v := pg.job(id); v.State != model.JobSucceeded {
		t.Errorf("job %s on PostgreSQL is %s, want succeeded", id, v.State)
	}
	if out := pg.gpufleet("audit", "verify"); !strings.Contains(out, "intact") {
		t.Errorf("audit verify on PostgreSQL: %s", out)
	}
}
