package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Budget webhooks are named by sealed secrets: their URLs and signing keys
// reach neither the fleet's documents, the API's budget view, the outbox's
// records nor anything else in the SQLite file, and a failed delivery's
// error does not quote its URL. The firing still arrives, signed with the
// budget's own key.
func TestWebhookSecretsSealedAtRest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "gpufleet.db")
	signingKey := "budget-signing-key-Zq81xv"
	rc := &receiver{t: t, secret: []byte(signingKey), failFirst: 1, seen: map[string]int{}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	hookURL := srv.URL + "/hooks/T0KEN-in-the-path-4d1f"
	deadURL := "http://127.0.0.1:1/hooks/unreachable-T0KEN-9a2c" // refuses connections: its error must not quote it

	h, shutdown, err := startSQLiteController(t, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	c, clk := h.c, h.clk

	budget := func(name string, hook *manifest.WebhookRef) manifest.Budget {
		return manifest.Budget{APIVersion: "gpufleet.dev/v1", Kind: manifest.KindBudget, Metadata: manifest.ObjectMeta{Name: name}, Spec: manifest.BudgetSpec{
			Scope: model.BudgetScope{Project: "nlp"}, Amount: 10 * model.Dollar, Period: model.BudgetPeriod{Kind: model.PeriodMonthly, StartDay: 1},
			Thresholds: []model.BudgetThreshold{{Percent: 50, Action: model.ActionNotify}}, Webhook: hook}}
	}
	fleet := &manifest.Set{Budgets: []manifest.Budget{
		budget("live", &manifest.WebhookRef{SecretRef: "ops/BUDGET_HOOK", SigningKeyRef: "ops/BUDGET_KEY"}),
		budget("dead", &manifest.WebhookRef{SecretRef: "ops/DEAD_HOOK", SigningKeyRef: "ops/BUDGET_KEY"}),
	}}

	// A reference to a secret the server does not hold is refused, and so
	// is a webhook with nothing to sign it.
	_, err = c.ApplyFleet(ctx, fleet, ApplyOptions{Author: "test"})
	var fe model.FieldErrors
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "project ops has no secret BUDGET_HOOK") {
		t.Fatalf("apply before the secrets exist: %v, want field errors naming the missing secret", err)
	}
	unsigned := &manifest.Set{Budgets: []manifest.Budget{budget("unsigned", &manifest.WebhookRef{SecretRef: "ops/BUDGET_HOOK"})}}
	for name, v := range map[string]string{"BUDGET_HOOK": hookURL, "DEAD_HOOK": deadURL, "BUDGET_KEY": signingKey} {
		if _, err := c.Vault().PutSecret(ctx, "ops", name, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ApplyFleet(ctx, unsigned, ApplyOptions{Author: "test"}); err == nil || !strings.Contains(err.Error(), "signingKeyRef: is required") {
		t.Fatalf("apply of a webhook with no signing key on a server without --webhook-secret: %v", err)
	}
	if _, err := c.ApplyFleet(ctx, fleet, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	// A secret a budget's webhook names cannot be deleted from under it.
	if err := c.Vault().DeleteSecret(ctx, "ops", "BUDGET_HOOK"); !errors.Is(err, ErrConflict) {
		t.Fatalf("deleting a webhook's secret: %v, want ErrConflict", err)
	}

	// Spend $18 of the $10 budgets: both fire.
	runJobOnOwn(h)
	if err := c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if err := c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 { // the first post to the live receiver fails; the dead one always does
		c.deliverDue(ctx)
		clk.Advance(time.Minute)
	}
	rc.mu.Lock()
	if diff := cmp.Diff(map[string]int{"live/0/2026-12-01": 1}, rc.seen); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
	rc.mu.Unlock()
	dead, _ := c.outbox.Waiting("dead/0/2026-12-01")
	if dead.LastError == "" || strings.Contains(dead.LastError, "T0KEN") {
		t.Errorf("the dead webhook's last error = %q, want an error that does not quote the URL", dead.LastError)
	}

	// The API's views name the secrets, never their values.
	views, _ := json.Marshal(c.Budgets(0))
	rev, err := c.Revision(1)
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := json.Marshal(rev.Documents)
	for what, data := range map[string][]byte{"budget views": views, "fleet documents": docs} {
		if !bytes.Contains(data, []byte("ops/BUDGET_HOOK")) {
			t.Errorf("%s do not name the webhook's secret: %s", what, data)
		}
		for _, v := range []string{hookURL, deadURL, signingKey, "T0KEN"} {
			if bytes.Contains(data, []byte(v)) {
				t.Errorf("%s hold %q: %s", what, v, data)
			}
		}
	}

	// The raw database (and its WAL) holds none of them.
	shutdown()
	files, err := filepath.Glob(dbPath + "*")
	if err != nil || len(files) == 0 {
		t.Fatalf("database files: %v %v", files, err)
	}
	var all []byte
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, raw...)
		for _, v := range []string{hookURL, deadURL, signingKey, "T0KEN", srv.URL} {
			if bytes.Contains(raw, []byte(v)) {
				t.Errorf("%s holds %q in clear", filepath.Base(f), v)
			}
		}
	}
	// …though it holds the references and the outbox (the scan is real).
	for _, v := range []string{"ops/BUDGET_HOOK", "live/0/2026-12-01", "dead/0/2026-12-01"} {
		if !bytes.Contains(all, []byte(v)) {
			t.Errorf("the database files do not hold %q: is the scan reading them?", v)
		}
	}
}
