package manifest

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/cost"
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
	set, fe := Parse([]Source{{Name: "b.yaml", Data: []byte(good)}}, nil)
	if len(fe) > 0 {
		t.Fatal(fe)
	}
	want := cost.Budget{Name: "nlp-monthly", Scope: cost.Scope{Project: "nlp"}, Amount: 5000 * cost.Dollar,
		Period: cost.Period{Kind: cost.Monthly, StartDay: 1}, Hard: true,
		Thresholds: []cost.Threshold{{Percent: 80, Action: cost.ActionNotify}, {Percent: 90, Action: cost.ActionStopSpot, Basis: cost.Forecast}}}
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
	_, fe = Parse([]Source{{Name: "b.yaml", Data: []byte(bad)}}, nil)
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
			_, fe := Parse([]Source{{Name: "b.yaml", Data: doc(tc.webhook)}}, nil)
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
