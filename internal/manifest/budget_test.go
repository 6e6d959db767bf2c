package manifest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestParseBudget(t *testing.T) {
	t.Parallel()
	good := `apiVersion: gpufleet.dev/v1
kind: Budget
metadata: {name: nlp-monthly}
spec:
  scope: {project: nlp}
  amount: "5000"
  period: {kind: monthly, startDay: 1}
  hard: true
  webhook: {secretRef: finance/BUDGET_HOOK, signingKeyRef: finance/BUDGET_KEY}
  thresholds:
    - {percent: 80, action: notify}
    - {percent: 90, action: stop-spot, basis: forecast}
`
	set, fe := Parse([]Source{{Name: "b.yaml", Data: []byte(good)}}, Checks{})
	if len(fe) > 0 {
		t.Fatal(fe)
	}
	want := model.Budget{Name: "nlp-monthly", Scope: model.BudgetScope{Project: "nlp"}, Amount: 5000 * model.Dollar,
		Period: model.BudgetPeriod{Kind: model.PeriodMonthly, StartDay: 1}, Hard: true,
		Thresholds: []model.BudgetThreshold{{Percent: 80, Action: model.ActionNotify}, {Percent: 90, Action: model.ActionStopSpot, Basis: model.BasisForecast}}}
	if diff := cmp.Diff(want, set.Budgets[0].Budget()); diff != "" {
		t.Errorf("budget (-want +got):\n%s", diff)
	}
	wantHook := &WebhookRef{SecretRef: "finance/BUDGET_HOOK", SigningKeyRef: "finance/BUDGET_KEY"}
	if diff := cmp.Diff(wantHook, set.Budgets[0].Spec.Webhook); diff != "" {
		t.Errorf("webhook (-want +got):\n%s", diff)
	}
	// Stored documents decode back to the same set.
	docs, _ := set.Documents()
	again, err := ParseStored(docs)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(set, again); diff != "" {
		t.Errorf("stored round trip (-want +got):\n%s", diff)
	}

	bad := `apiVersion: gpufleet.dev/v1
kind: Budget
metadata: {name: x}
spec:
  scope: {}
  amount: "-1"
  period: {kind: daily}
  webhook: {secretRef: "https://hooks.example.com/x"}
  bogus: 1
  thresholds: [{percent: 0, action: explode}]
`
	_, fe = Parse([]Source{{Name: "b.yaml", Data: []byte(bad)}}, Checks{})
	var paths []string
	for _, e := range fe {
		paths = append(paths, e.Path)
	}
	wantPaths := []string{"b.yaml[0].spec.amount", "b.yaml[0].spec.bogus", "b.yaml[0].spec.period.kind", "b.yaml[0].spec.scope",
		"b.yaml[0].spec.thresholds[0].action", "b.yaml[0].spec.thresholds[0].percent", "b.yaml[0].spec.webhook.secretRef"}
	if diff := cmp.Diff(wantPaths, paths); diff != "" {
		t.Errorf("problem paths (-want +got):\n%s\n%v", diff, fe)
	}
}

// A webhook is named by sealed secrets, never written into the document:
// a URL where the reference belongs is refused.
func TestBudgetWebhookIsAReference(t *testing.T) {
	t.Parallel()
	doc := func(webhook string) []byte {
		return []byte("apiVersion: gpufleet.dev/v1\nkind: Budget\nmetadata: {name: b}\nspec:\n  scope: {project: nlp}\n  amount: \"10\"\n  period: {kind: monthly}\n  webhook: " + webhook + "\n")
	}
	for name, tc := range map[string]struct {
		webhook string
		want    []string // problem paths
	}{
		"reference":          {webhook: "{secretRef: ops/HOOK}"},
		"with a signing key": {webhook: "{secretRef: ops/HOOK, signingKeyRef: ops/HOOK_KEY}"},
		"a plain URL":        {webhook: "https://hooks.example.com/x", want: []string{"b.yaml[0].spec.webhook"}},
		"no project":         {webhook: "{secretRef: HOOK}", want: []string{"b.yaml[0].spec.webhook.secretRef"}},
		"no reference":       {webhook: "{signingKeyRef: ops/K}", want: []string{"b.yaml[0].spec.webhook.secretRef"}},
		"bad key name":       {webhook: "{secretRef: ops/HOOK, signingKeyRef: ops/9bad}", want: []string{"b.yaml[0].spec.webhook.signingKeyRef"}},
		"unknown field":      {webhook: "{secretRef: ops/HOOK, url: x}", want: []string{"b.yaml[0].spec.webhook.url"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, fe := Parse([]Source{{Name: "b.yaml", Data: doc(tc.webhook)}}, Checks{})
			var got []string
			for _, e := range fe {
				got = append(got, e.Path)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problem paths (-want +got):\n%s\n%v", diff, fe)
			}
		})
	}
}

// A user writing a webhook the way budgets were written before secret
// references (a URL, or a url or secret key) is told, at the field, what
// to write instead.
func TestBudgetInlineWebhookSaysWhatToDo(t *testing.T) {
	t.Parallel()
	doc := func(webhook string) []byte {
		return []byte("apiVersion: gpufleet.dev/v1\nkind: Budget\nmetadata: {name: b}\nspec:\n  scope: {project: nlp}\n  amount: \"10\"\n  period: {kind: monthly}\n  webhook: " + webhook + "\n")
	}
	for name, tc := range map[string]struct {
		webhook string
		path    string
		says    []string
	}{
		"a plain URL":     {webhook: "https://hooks.example.com/x", path: "b.yaml[0].spec.webhook", says: []string{"gpufleet secrets set", "secretRef: PROJECT/NAME"}},
		"an empty string": {webhook: `""`, path: "b.yaml[0].spec.webhook", says: []string{"gpufleet secrets set", "secretRef: PROJECT/NAME"}},
		"a url key":       {webhook: "{url: https://hooks.example.com/x}", path: "b.yaml[0].spec.webhook.url", says: []string{"gpufleet secrets set", "secretRef: PROJECT/NAME"}},
		"a secret key":    {webhook: "{secretRef: ops/HOOK, secret: k}", path: "b.yaml[0].spec.webhook.secret", says: []string{"gpufleet secrets set", "signingKeyRef: PROJECT/KEY_NAME"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, fe := Parse([]Source{{Name: "b.yaml", Data: doc(tc.webhook)}}, Checks{})
			var at []string
			for _, e := range fe {
				if e.Path == tc.path {
					at = append(at, e.Message)
				}
			}
			if len(at) != 1 {
				t.Fatalf("want one problem at %s, got %v", tc.path, fe)
			}
			for _, s := range tc.says {
				if !strings.Contains(at[0], s) {
					t.Errorf("%s: %q does not say %q", tc.path, at[0], s)
				}
			}
			if strings.Contains(at[0], "hooks.example.com") {
				t.Errorf("%s: %q quotes the URL", tc.path, at[0])
			}
		})
	}
}

// legacyBudgetDoc is a Budget document as versions before secret
// references recorded it in a fleet revision: spec.webhook a URL string.
func legacyBudgetDoc(name, webhook string) json.RawMessage {
	return json.RawMessage(`{"apiVersion":"gpufleet.dev/v1","kind":"Budget","metadata":{"name":"` + name + `"},` +
		`"spec":{"scope":{"project":"nlp"},"amount":"10","period":{"kind":"monthly","startDay":1},` +
		`"thresholds":[{"percent":50,"action":"notify"}],"webhook":"` + webhook + `"}}`)
}

// A revision recorded before secret references still loads, keeping its
// inline URL (never encoded again); the rest of the document is still
// checked, and a user cannot submit the form.
func TestParseStoredInlineWebhook(t *testing.T) {
	t.Parallel()
	const url = "https://hooks.example.com/T0KEN"
	modern := json.RawMessage(`{"apiVersion":"gpufleet.dev/v1","kind":"Budget","metadata":{"name":"modern"},` +
		`"spec":{"scope":{"project":"nlp"},"amount":"10","period":{"kind":"monthly","startDay":1},"webhook":{"secretRef":"ops/HOOK"}}}`)
	set, err := ParseStored([]json.RawMessage{legacyBudgetDoc("legacy", url), modern})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*WebhookRef{}
	for _, b := range set.Budgets {
		got[b.Metadata.Name] = b.Spec.Webhook
	}
	want := map[string]*WebhookRef{"legacy": {LegacyURL: url}, "modern": {SecretRef: "ops/HOOK"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("webhooks (-want +got):\n%s", diff)
	}
	if want := (model.Budget{Name: "legacy", Scope: model.BudgetScope{Project: "nlp"}, Amount: 10 * model.Dollar,
		Period:     model.BudgetPeriod{Kind: model.PeriodMonthly, StartDay: 1},
		Thresholds: []model.BudgetThreshold{{Percent: 50, Action: model.ActionNotify}}}); !cmp.Equal(want, set.Budgets[0].Budget()) {
		t.Errorf("legacy budget (-want +got):\n%s", cmp.Diff(want, set.Budgets[0].Budget()))
	}
	if !set.Budgets[0].Spec.Webhook.Legacy() || set.Budgets[1].Spec.Webhook.Legacy() {
		t.Errorf("Legacy() is wrong: %+v", got)
	}
	docs, _ := set.Documents()
	if b, _ := json.Marshal(docs); strings.Contains(string(b), "T0KEN") {
		t.Errorf("re-encoded documents hold the inline URL: %s", b)
	}
	// Such a set cannot be recorded again as it is.
	if fe := set.Budgets[0].Validate(nil); len(fe) != 1 || fe[0].Path != "spec.webhook" || strings.Contains(fe[0].Message, "T0KEN") {
		t.Errorf("validating a legacy webhook: %v, want one problem at spec.webhook", fe)
	}

	// Everything else in a stored legacy document is still checked.
	bad := json.RawMessage(strings.Replace(string(legacyBudgetDoc("legacy", url)), `"amount":"10"`, `"amount":"-1"`, 1))
	if _, err := ParseStored([]json.RawMessage{bad}); err == nil || !strings.Contains(err.Error(), "spec.amount") {
		t.Errorf("a stored legacy budget with a bad amount: %v, want a problem at spec.amount", err)
	}
	// The same document submitted is refused at the field.
	_, fe := Parse([]Source{{Name: "documents", Data: legacyBudgetDoc("legacy", url), Format: JSON}}, Checks{})
	if len(fe) != 1 || fe[0].Path != "documents[0].spec.webhook" || !strings.Contains(fe[0].Message, "secretRef") {
		t.Errorf("submitting the legacy form: %v, want one problem at documents[0].spec.webhook", fe)
	}
}
