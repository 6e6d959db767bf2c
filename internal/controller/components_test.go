package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/audit"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/secrets"
	"github.com/gpufleet/gpufleet/internal/store/sqlite"
)

func withKeyring(t *testing.T) func(*Config) {
	t.Helper()
	k, err := secrets.NewKeyring(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return func(c *Config) { c.Keyring = k }
}

// Identity, audit and the vault keep their own locks: with the scheduling
// lock held (as by a long pass or a plan commit), authenticating, granting,
// auditing and reading or writing secrets all complete, durably.
func TestComponentsDoNotWaitForTheSchedulingLock(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0), withKeyring(t))
	ctx := context.Background()
	id, vault := h.c.Identity(), h.c.Vault()
	tok, secret, err := id.CreateToken(ctx, model.TokenRequest{Kind: model.TokenUser, Subject: "ada", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}

	h.c.mu.Lock()
	locked := true
	defer func() {
		if locked {
			h.c.mu.Unlock()
		}
	}()
	steps := []struct {
		name string
		do   func() error
	}{
		{"Authenticate", func() error {
			got, err := id.Authenticate(secret)
			if err == nil && got.ID != tok.ID {
				err = fmt.Errorf("authenticated as %s, want %s", got.ID, tok.ID)
			}
			return err
		}},
		{"AuthenticateHash", func() error { _, err := id.AuthenticateHash(tok.Hash); return err }},
		{"CreateToken", func() error {
			_, _, err := id.CreateToken(ctx, model.TokenRequest{Kind: model.TokenAgent, Subject: "node", TTL: time.Hour})
			return err
		}},
		{"Grant", func() error {
			_, err := id.Grant(ctx, model.Grant{User: "ada", Project: "ml", Role: model.RoleMember})
			return err
		}},
		{"RoleIn", func() error {
			if r := id.RoleIn(tok, "ml"); r != model.RoleMember {
				return fmt.Errorf("role %q, want member", r)
			}
			return nil
		}},
		{"Audit", func() error {
			_, err := h.c.AuditLog().Audit(ctx, model.AuditEntry{Actor: "ada", Action: "GET /v1/jobs", Result: 200})
			return err
		}},
		{"PutSecret", func() error {
			_, err := vault.PutSecret(ctx, "ml", "HF_TOKEN", []byte("hf_0123456789abcdef"))
			return err
		}},
		{"Secrets", func() error {
			if n := len(vault.Secrets("ml")); n != 1 {
				return fmt.Errorf("%d secrets, want 1", n)
			}
			return nil
		}},
		{"RevokeToken", func() error { return id.RevokeToken(ctx, tok.ID) }},
	}
	for _, s := range steps {
		done := make(chan error, 1)
		go func() { done <- s.do() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s with the scheduling lock held: %v", s.name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s blocked on the scheduling lock", s.name)
		}
	}
	h.c.mu.Unlock()
	locked = false
	if _, err := id.Authenticate(secret); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("revoked token authenticates: %v", err)
	}
}

// Audit entries appended on their own and with job submissions, from many
// goroutines at once, reach the store in chain order: after a restart the
// chain verifies and continues.
func TestAuditChainOrderAcrossComponents(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpufleet.db")
	h, shutdown, err := startSQLiteController(t, db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 16 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			e := model.AuditEntry{Actor: "ada", Action: "POST /v1/jobs", Result: 201}
			spec := cmdSpec(0)
			spec.Default()
			_, _, err := h.c.Submit(ctx, Submission{Project: "default", User: "ada", Spec: spec, Audit: &e})
			errs <- err
		}()
		go func() {
			defer wg.Done()
			_, err := h.c.AuditLog().Audit(ctx, model.AuditEntry{Actor: "bob", Action: fmt.Sprintf("GET /v1/jobs?i=%d", i), Result: 200})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	shutdown()

	h, shutdown, err = startSQLiteController(t, db)
	if err != nil {
		t.Fatal(err)
	}
	next, err := h.c.AuditLog().Audit(ctx, model.AuditEntry{Actor: "ada", Action: "GET /v1/audit", Result: 200})
	if err != nil {
		t.Fatal(err)
	}
	shutdown()
	if next.Seq != 33 {
		t.Fatalf("entry after restart has seq %d, want 33", next.Seq)
	}
	st, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	entries, err := st.Audit(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 33 {
		t.Fatalf("%d entries stored, want 33", len(entries))
	}
	if err := audit.Verify(entries); err != nil {
		t.Fatalf("chain: %v", err)
	}
}

// What identity and the vault answered is on disk: after a restart the
// token, the revocation, the grant and the secret are as they were, and a
// job's token minted at bind time is revoked with the job's end.
func TestComponentsSurviveRestart(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpufleet.db")
	h, shutdown, err := startSQLiteController(t, db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := h.c.Identity()
	kept, keptSecret, err := id.CreateToken(ctx, model.TokenRequest{Kind: model.TokenUser, Subject: "ada", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	gone, goneSecret, err := id.CreateToken(ctx, model.TokenRequest{Kind: model.TokenAgent, Subject: "node", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := id.RevokeToken(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := id.Grant(ctx, model.Grant{User: "ada", Project: "ml", Role: model.RoleMember}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Vault().PutSecret(ctx, "ml", "HF_TOKEN", []byte("hf_0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	h.registerNode("n1", 1, model.Owned)
	spec := cmdSpec(1)
	spec.Default()
	j, _, err := h.c.Submit(ctx, Submission{Project: "ml", User: "ada", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	h.node = "n1"
	rs := h.waitDesired(1).Replicas[0]
	jobSecret := rs.Env["GPUFLEET_JOB_TOKEN"]
	if _, err := id.Authenticate(jobSecret); err != nil {
		t.Fatalf("job token: %v", err)
	}
	h.sync(running(rs.ID))
	h.waitJob(j.ID, model.JobRunning)
	h.sync(exited(rs.ID, 0, ""))
	h.waitJob(j.ID, model.JobSucceeded)
	shutdown()

	h, shutdown, err = startSQLiteController(t, db)
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown()
	id = h.c.Identity()
	if tok, err := id.Authenticate(keptSecret); err != nil || tok.ID != kept.ID {
		t.Fatalf("token after restart: %+v, %v", tok, err)
	}
	for name, s := range map[string]string{"revoked token": goneSecret, "finished job's token": jobSecret} {
		if _, err := id.Authenticate(s); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s authenticates after restart: %v", name, err)
		}
	}
	if r := id.RoleIn(kept, "ml"); r != model.RoleMember {
		t.Errorf("role after restart %q, want member", r)
	}
	if env, err := h.c.Vault().Env("ml", []string{"HF_TOKEN"}); err != nil || env["HF_TOKEN"] != "hf_0123456789abcdef" {
		t.Errorf("secret after restart: %v, %v", env, err)
	}
}

// BenchmarkAuthenticate times authentications arriving at random moments
// (one every 200 µs, as API requests arrive independently of passes), with
// the scheduling lock idle, and while another goroutine holds it 20 ms at a
// time with 2 ms gaps, as long passes or plan commits under a deep queue
// do. It reports the median and 99th percentile of one call; ns/op is the
// mean call, without the pauses between calls. Authentication has its own
// lock, so the busy figures should stay near the idle ones.
func BenchmarkAuthenticate(b *testing.B) {
	logs, err := logstore.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	c, err := New(context.Background(), Config{Store: newMemStore(), Logs: logs, Clock: clock.NewFake(t0), PassGap: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	_, secret, err := c.Identity().CreateToken(context.Background(), model.TokenRequest{Kind: model.TokenUser, Subject: "ada", TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B) {
		took := make([]time.Duration, b.N)
		var sum time.Duration
		for i := range took {
			time.Sleep(200 * time.Microsecond)
			start := time.Now()
			if _, err := c.Identity().Authenticate(secret); err != nil {
				b.Fatal(err)
			}
			took[i] = time.Since(start)
			sum += took[i]
		}
		slices.Sort(took)
		b.ReportMetric(float64(sum.Nanoseconds())/float64(b.N), "ns/op")
		b.ReportMetric(float64(took[b.N/2].Nanoseconds())/1e3, "p50-µs")
		b.ReportMetric(float64(took[b.N*99/100].Nanoseconds())/1e3, "p99-µs")
	}
	b.Run("lock=idle", run)
	b.Run("lock=busy", func(b *testing.B) {
		stop, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.mu.Lock()
				time.Sleep(20 * time.Millisecond)
				c.mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
		defer func() { close(stop); <-stopped }()
		run(b)
	})
}
