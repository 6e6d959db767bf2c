package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite" // the store's driver, to tamper with the file
)

// TestAuditTamperDetected: mutations through the CLI land in the audit
// log, `gpufleet audit verify` accepts the log, and after one stored entry
// is edited in the database file (the append-only triggers dropped, as an
// attacker with the file would), verify fails naming that entry.
func TestAuditTamperDetected(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir, freePort(t))
	s.gpufleet("roles", "grant", "alice", "nlp", "member")
	s.gpufleet("tokens", "create", "alice", "--ttl", "1h")
	s.gpufleet("run", "--gpus", "0", "--", "true")
	if out := s.gpufleet("audit"); !strings.Contains(out, "PUT /v1/grants") || !strings.Contains(out, "POST /v1/jobs") {
		t.Fatalf("audit log lacks the mutations:\n%s", out)
	}
	if out := s.gpufleet("audit", "verify"); !strings.Contains(out, "intact") {
		t.Fatalf("verify on an untouched log: %s", out)
	}
	if out := s.gpufleet("users"); !strings.Contains(out, "nlp=member") {
		t.Fatalf("users does not show alice's role:\n%s", out)
	}

	// Rotating the admin token revokes the old one and saves the new one.
	old, err := os.ReadFile(filepath.Join(dir, tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	s.gpufleet("tokens", "rotate-admin")
	if out, err := s.gpufleetErr("nodes", "list"); err != nil {
		t.Fatalf("the rotated token does not work: %v\n%s", err, out)
	}
	cmd := s.gpufleetCmd("nodes", "list")
	cmd.Env = append(cmd.Env, "GPUFLEET_TOKEN="+strings.TrimSpace(string(old)))
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "401") && !strings.Contains(strings.ToLower(string(out)), "unauthorized") {
		t.Fatalf("the old admin token still works or fails oddly: %v\n%s", err, out)
	}
	s.kill()

	db, err := sql.Open("sqlite", filepath.Join(dir, "gpufleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE audit SET data = json_set(data, '$.result', 200) WHERE seq = 2`); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Fatalf("editing the audit table: %v, want the append-only trigger to refuse", err)
	}
	for _, q := range []string{`DROP TRIGGER audit_no_update`, `UPDATE audit SET data = json_set(data, '$.actor', 'user:mallory') WHERE seq = 2`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s = startServer(t, dir, freePort(t))
	out, err := s.gpufleetErr("audit", "verify")
	if err == nil || !strings.Contains(out, "entry 2") {
		t.Fatalf("verify after tampering: %v\n%s\nwant a failure naming entry 2", err, out)
	}
}
