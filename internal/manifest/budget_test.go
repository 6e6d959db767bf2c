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
  webhook: https://hooks.example.com/cost
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
  webhook: ftp://x
  bogus: 1
  thresholds: [{percent: 0, action: explode}]
`
	_, fe = Parse([]Source{{Name: "b.yaml", Data: []byte(bad)}}, nil)
	var paths []string
	for _, e := range fe {
		paths = append(paths, e.Path)
	}
	wantPaths := []string{"b.yaml[0].spec.amount", "b.yaml[0].spec.bogus", "b.yaml[0].spec.period.kind", "b.yaml[0].spec.scope",
		"b.yaml[0].spec.thresholds[0].action", "b.yaml[0].spec.thresholds[0].percent", "b.yaml[0].spec.webhook"}
	if diff := cmp.Diff(wantPaths, paths); diff != "" {
		t.Errorf("problem paths (-want +got):\n%s\n%v", diff, fe)
	}
}
