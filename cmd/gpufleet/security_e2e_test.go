package main

import (
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite" // the store's driver, to tamper with the file

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/server"
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

// TestNoSecretLeaks runs the server at debug log level through a job's
// whole life with a project secret and user, admin and job tokens, then
// looks for their values in the server's log, events, audit log, API
// answers and the database file, and finds none. The job proves it got
// the secret by printing a digest of it.
func TestNoSecretLeaks(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir, freePort(t), "--log-level", "debug")
	const value = "hf_Zq8vN3xLk2PwT7sRm4Yb"

	var alice api.TokenCreated
	if err := json.Unmarshal([]byte(s.gpufleet("tokens", "create", "alice", "--ttl", "1h", "-o", "json")), &alice); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("roles", "grant", "alice", "nlp", "project-admin")
	asAlice := func(stdin string, args ...string) string {
		t.Helper()
		cmd := s.gpufleetCmd(args...)
		cmd.Env = append(cmd.Env, "GPUFLEET_TOKEN="+alice.Secret)
		cmd.Stdin = strings.NewReader(stdin)
		cmd.Dir = t.TempDir() // uploaded: alice, no admin, may not run in a host folder
		out, err := outputOf(cmd)
		if err != nil {
			t.Fatalf("gpufleet %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	asAlice(value+"\n", "secrets", "set", "nlp", "HF_TOKEN")
	// A job that names a secret its project lacks is refused by field.
	if out, err := s.gpufleetErr("run", "--project", "nlp", "--secret", "NOPE", "--", "true"); err == nil || !strings.Contains(out, "spec.run.secrets[0]") {
		t.Fatalf("a job naming a missing secret: %v\n%s", err, out)
	}
	id := strings.TrimSpace(asAlice("", "run", "--upload-workdir", "--project", "nlp", "--secret", "HF_TOKEN", "--", "sh", "-c",
		`printf '%s' "$HF_TOKEN" | sha256sum | cut -c1-16; echo "job token set: ${GPUFLEET_JOB_TOKEN:+yes}"`))
	v := s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if v.State != model.JobSucceeded {
		t.Fatalf("job %s %s\n%s", v.State, v.Reason, s.gpufleet("jobs", "logs", id))
	}
	sum := sha256.Sum256([]byte(value))
	if got, want := s.gpufleet("jobs", "logs", id), hex.EncodeToString(sum[:])[:16]+"\njob token set: yes\n"; got != want {
		t.Fatalf("job output %q, want %q: the secret did not reach the job", got, want)
	}

	// The job token: the agent's copy of the replica spec holds it (and
	// the secret), at mode 0600.
	jobToken := jobTokenOf(t, dir, id)
	admin, err := os.ReadFile(filepath.Join(dir, tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(filepath.Join(dir, secretKeyFile)); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the sealing key file: %v, mode %v, want 0600", err, info.Mode().Perm())
	}

	places := map[string]string{
		"events":       s.gpufleet("events", "-o", "json", "--limit", "1000"),
		"audit":        s.gpufleet("audit", "-o", "json"),
		"job":          s.gpufleet("jobs", "get", id, "-o", "json"),
		"jobs":         s.gpufleet("jobs", "list", "--all", "-o", "json"),
		"secrets list": asAlice("", "secrets", "list", "nlp", "-o", "json"),
		"explain":      s.gpufleet("explain", id),
		"tokens":       s.gpufleet("tokens", "list", "-o", "json"),
	}
	if !strings.Contains(places["secrets list"], "HF_TOKEN") {
		t.Fatalf("secrets list lacks the name:\n%s", places["secrets list"])
	}
	s.kill() // flushes the log and the database
	places["server log"] = s.out.String()
	for _, f := range []string{"gpufleet.db", "gpufleet.db-wal"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		places[f] = string(data)
	}
	if !strings.Contains(places["server log"], "level=DEBUG") {
		t.Fatalf("the server did not log at debug level:\n%s", places["server log"])
	}
	secrets := map[string]string{"secret value": value, "alice's token": alice.Secret, "admin token": strings.TrimSpace(string(admin)), "job token": jobToken}
	for what, secret := range secrets {
		for where, text := range places {
			if strings.Contains(text, secret) {
				t.Errorf("the %s is in the %s", what, where)
			}
		}
	}
}

// TestTLSPinned: `up --tls` serves HTTPS with a self-signed loopback
// certificate; the CLI pins it from the data dir, an agent pins it with
// --ca, and a client that trusts another certificate is refused.
func TestTLSPinned(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir, freePort(t), "--tls")
	data, err := os.ReadFile(filepath.Join(dir, serverFile))
	if err != nil || !strings.Contains(string(data), `"https://`) {
		t.Fatalf("server.json: %s %v, want an https URL", data, err)
	}
	if info, err := os.Stat(filepath.Join(dir, tlsDir, tlsKeyFile)); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("TLS key: %v, want mode 0600", err)
	}
	// Plain HTTP gets no API.
	if resp, err := http.Get("http://" + s.listen + "/v1/version"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP answered %d", resp.StatusCode)
		}
	}
	// A client pinning another certificate refuses the server.
	other := t.TempDir()
	if _, _, err := server.SelfSignedCert(other); err != nil {
		t.Fatal(err)
	}
	cmd := s.gpufleetCmd("nodes", "list")
	cmd.Env = append(cmd.Env, "GPUFLEET_CA="+filepath.Join(other, tlsDir, tlsCertFile))
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "certificate") {
		t.Fatalf("a client pinning another certificate: %v\n%s", err, out)
	}
	// A job on the local node reaches the https server from inside: its
	// agent puts the certificate in the job's tree (GPUFLEET_CA), and the
	// CLI in the job pins it for `gpufleet metric` and its own job token.
	script := `set -e
case "$GPUFLEET_SERVER" in https://*) ;; *) echo "GPUFLEET_SERVER=$GPUFLEET_SERVER is not https"; exit 2;; esac
test -s "$GPUFLEET_CA" || { echo "no certificate at GPUFLEET_CA=$GPUFLEET_CA"; exit 3; }
gpufleet metric --step 1 loss=0.5
gpufleet jobs get "$GPUFLEET_JOB_ID" -o json > /dev/null
echo "in-job calls ok"`
	job, err := json.Marshal(map[string]any{
		"apiVersion": "gpufleet.dev/v1", "kind": "Job", "metadata": map[string]any{"name": "tls-inside"},
		"spec": map[string]any{
			"resources": map[string]any{"gpus": 0},
			"run":       map[string]any{"command": []string{"sh", "-c", script}, "env": map[string]string{"PATH": filepath.Dir(binary) + ":" + os.Getenv("PATH")}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	jobFile := filepath.Join(sharedDir(t), "job.json")
	if err := os.WriteFile(jobFile, job, 0o600); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(s.gpufleet("run", "-f", jobFile))
	if v := s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended"); v.State != model.JobSucceeded {
		t.Fatalf("in-job calls over TLS: job %s, want succeeded\nlogs:\n%s", v.State, s.gpufleet("jobs", "logs", id))
	}
	if logs := s.gpufleet("jobs", "logs", id); !strings.Contains(logs, "in-job calls ok") {
		t.Errorf("job logs = %q", logs)
	}

	a := startAgent(t, s, "n-tls", "2xH100")
	a.cmd.Process.Kill()
	_ = a.cmd.Wait()
	a.args = []string{"--server", "https://" + s.listen, "--ca", filepath.Join(dir, tlsDir, tlsCertFile), "--fake-gpus", "2xH100", "--name", "n-tls"}
	a.start()
	s.waitNodes(2)
}
