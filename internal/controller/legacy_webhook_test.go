package controller

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store/sqlite"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// A data dir written before budget webhooks became secret references holds
// a fleet revision whose budget names its receiver by an inline URL, and an
// outbox row naming its receiver the same way. The server still starts,
// warns once about the budget without logging its URL, delivers the old
// row and the budget's next firing there (signed with --webhook-secret, as
// before), refuses to record the form again (a rollback to it), and takes
// the secretRef form that replaces it.
func TestLegacyInlineWebhookStillLoadsAndDelivers(t *testing.T) {
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "gpufleet.db")
	secret := []byte("server-webhook-secret-16+")
	rc := &receiver{t: t, secret: secret, seen: map[string]int{}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	hookURL := srv.URL + "/hooks/T0KEN-legacy-7c1e"

	// 1. The rows as the earlier version wrote them. Opening the store
	// creates the schema, which that version shared.
	st, err := sqlite.Open(ctx, dbPath, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dbPath)
	if err != nil {
		t.Fatal(err)
	}
	budgetDoc := `{"apiVersion":"gpufleet.dev/v1","kind":"Budget","metadata":{"name":"legacy"},` +
		`"spec":{"scope":{"project":"nlp"},"amount":"10","period":{"kind":"monthly","startDay":1},` +
		`"thresholds":[{"percent":50,"action":"notify"}],"webhook":"` + hookURL + `"}}`
	rev := `{"number":1,"createdAt":"2026-11-20T00:00:00Z","author":"ops","digest":"0123abcd","documents":[` + budgetDoc + `]}`
	oldBody := base64.StdEncoding.EncodeToString([]byte(`{"id":"legacy/0/2026-11-01","budget":"legacy"}`))
	oldNote := `{"id":"legacy/0/2026-11-01","url":"` + hookURL + `","body":"` + oldBody + `","attempts":1,` +
		`"nextAt":"2026-11-30T23:00:00Z","lastError":"503 Service Unavailable","created":"2026-11-30T22:00:00Z"}`
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO revisions (number, digest, data) VALUES (1, '0123abcd', ?)`, []any{rev}},
		{`INSERT INTO notifications (id, delivered, data) VALUES ('legacy/0/2026-11-01', 0, ?)`, []any{oldNote}},
	} {
		if _, err := db.ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("writing the old rows: %v", err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// 2. This version starts on it.
	var logged testutil.SyncBuffer
	h, _, err := startSQLiteController(t, dbPath, func(cfg *Config) {
		cfg.Cost.WebhookSecret = secret
		cfg.Log = slog.New(slog.NewJSONHandler(&logged, nil))
	})
	if err != nil {
		t.Fatalf("starting on a data dir with an inline budget webhook: %v", err)
	}
	c, clk := h.c, h.clk

	var warnings []map[string]any
	for line := range strings.Lines(logged.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["level"] == "WARN" && rec["budget"] == "legacy" {
			warnings = append(warnings, rec)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0]["fix"].(string), "gpufleet secrets set") {
		t.Errorf("start-up warnings about budget legacy: %v, want one saying to move the URL into a secret", warnings)
	}
	if views := c.Budgets(0); len(views) != 1 || views[0].Webhook != legacyWebhookName {
		t.Errorf("budget views: %+v, want budget legacy with webhook %q", views, legacyWebhookName)
	}

	// 3. The old outbox row, then the budget's next firing, reach the
	// inline URL, signed with the server's secret.
	c.deliverDue(ctx)
	runJobOnOwn(h) // $36/h against a $10 budget
	for range 2 {
		if err := c.CostPass(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour)
	}
	c.deliverDue(ctx)
	rc.mu.Lock()
	if diff := cmp.Diff(map[string]int{"legacy/0/2026-11-01": 1, "legacy/0/2026-12-01": 1}, rc.seen); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
	rc.mu.Unlock()

	// 4. A new revision may not record the inline URL again: rolling back
	// to revision 1 is refused, at the field, saying what to do.
	_, err = c.Rollback(ctx, 1, ApplyOptions{Author: "test"})
	var fe model.FieldErrors
	if !errors.As(err, &fe) || len(fe) != 1 || fe[0].Path != "Budget/legacy: spec.webhook" || !strings.Contains(fe[0].Message, "secretRef") {
		t.Errorf("rollback to the inline webhook: %v, want one problem at Budget/legacy: spec.webhook", err)
	}

	// 5. The way out: the URL into a secret, the budget re-applied with
	// a reference. The warning's advice works.
	if _, err := c.Vault().PutSecret(ctx, "ops", "BUDGET_HOOK", []byte(hookURL)); err != nil {
		t.Fatal(err)
	}
	moved := strings.Replace(budgetDoc, `"webhook":"`+hookURL+`"`, `"webhook":{"secretRef":"ops/BUDGET_HOOK"}`, 1)
	set, problems := manifest.Parse([]manifest.Source{{Name: "documents", Data: []byte(moved), Format: manifest.JSON}}, manifest.Checks{})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	res, err := c.ApplyFleet(ctx, set, ApplyOptions{Author: "test"})
	if err != nil || res.Revision.Number != 2 {
		t.Fatalf("re-applying with secretRef: %+v, %v", res, err)
	}
	if views := c.Budgets(0); len(views) != 1 || views[0].Webhook != "ops/BUDGET_HOOK" {
		t.Errorf("budget views after the move: %+v", views)
	}

	if strings.Contains(logged.String(), "T0KEN") {
		t.Errorf("the logs quote the inline URL:\n%s", logged.String())
	}
}
