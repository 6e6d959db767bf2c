package sim

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestExampleScenario(t *testing.T) {
	data, err := os.ReadFile("testdata/scenario.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseScenario(data)
	if err != nil {
		t.Fatalf("ParseScenario: %v", err)
	}
	want := &Scenario{
		Clouds: map[string]CloudSpec{
			"aws":   {NoticeLead: ptr(model.Duration(2 * time.Minute)), Quota: map[string]int{"H100": 64, "*": 512}},
			"azure": {BootDelay: &Range{Min: model.Duration(5 * time.Minute), Max: model.Duration(7 * time.Minute)}},
		},
		Offers: []OfferRule{
			{Match: Match{Cloud: "aws", InstanceType: "p5.*"}, Capacity: ptr(2)},
			{Match: Match{Cloud: "aws", InstanceType: "p5.*", CapacityType: model.Spot}, InterruptionRate: ptr(1.5)},
			{Match: Match{Cloud: "aws", Region: "us-east-1", InstanceType: "g5.xlarge", CapacityType: model.Spot}, InterruptAfter: ptr(model.Duration(45 * time.Minute))},
			{Match: Match{Cloud: "gcp", Region: "europe-*"}, Fail: &Failure{First: 1, Probability: 0.2, Error: FailTransient}},
		},
	}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("example scenario (-want +got):\n%s", diff)
	}
	// It must also build against the real catalog, and do what it says.
	p, _ := newSim(t, Config{Scenario: s})
	offers, _ := p.Offers(ctx)
	for _, o := range offers {
		if o.Provider == "aws" && o.CapacityType == model.Spot && len(o.InstanceType) > 3 && o.InstanceType[:3] == "p5." {
			if o.InterruptionRate != 1.5 {
				t.Errorf("%s spot rate = %v, want the scenario's 1.5", o.InstanceType, o.InterruptionRate)
			}
			if free, _ := p.Free(o); free != 2 {
				t.Errorf("%s free = %d, want the scenario's 2", o.InstanceType, free)
			}
		}
	}
}

func TestScenarioErrorsHavePaths(t *testing.T) {
	for name, tc := range map[string]struct {
		yaml string
		want model.FieldErrors
	}{
		"unknown field": {yaml: "offers:\n- match: {cloud: aws}\n  capasity: 2\n",
			want: model.FieldErrors{{Path: "offers[0].capasity", Message: `unknown field (did you mean "capacity"?)`}}},
		"wrong type": {yaml: "clouds: {aws: {quota: {H100: lots}}}\n",
			want: model.FieldErrors{{Path: "clouds.aws.quota.H100", Message: "want an integer, got string"}}},
		"bad duration": {yaml: "clouds: {gcp: {bootDelay: {min: soon, max: 2m}}}\n",
			want: model.FieldErrors{{Path: "clouds.gcp.bootDelay.min", Message: `"soon" is not a duration (want e.g. 90s, 30m, 12h, 7d)`}}},
		"every semantic problem at once": {yaml: `
clouds:
  aws: {bootDelay: {min: 2m, max: 1m}, noticeLead: 0s, quota: {"*": -1}}
offers:
  - match: {region: "us-[", capacityType: preemptible}
    capacity: -1
    interruptionRate: -0.5
    interruptAfter: 0s
  - match: {cloud: gcp}
  - match: {cloud: gcp}
    fail: {first: -1, probability: 1.5, error: boom}
  - match: {cloud: gcp}
    fail: {}
`, want: model.FieldErrors{
			{Path: "clouds.aws.bootDelay.max", Message: "must be >= min"},
			{Path: "clouds.aws.noticeLead", Message: "must be > 0"},
			{Path: `clouds.aws.quota["*"]`, Message: "must be >= 0"},
			{Path: "offers[0].capacity", Message: "must be >= 0"},
			{Path: "offers[0].interruptAfter", Message: "must be > 0"},
			{Path: "offers[0].interruptionRate", Message: "must be a finite number >= 0"},
			{Path: "offers[0].match.capacityType", Message: `"preemptible" is not on-demand, spot or reserved`},
			{Path: "offers[0].match.region", Message: `"us-[" is not a valid pattern`},
			{Path: "offers[1]", Message: "sets nothing; want capacity, interruptionRate, interruptAfter, bootDelay or fail"},
			{Path: "offers[2].fail.error", Message: `"boom" is not insufficient-capacity, quota-exceeded or transient`},
			{Path: "offers[2].fail.first", Message: "must be >= 0"},
			{Path: "offers[2].fail.probability", Message: "must be between 0 and 1"},
			{Path: "offers[3].fail", Message: "fails nothing; want first > 0 or probability > 0"},
		}},
		"not yaml": {yaml: "offers: [\n", want: nil},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseScenario([]byte(tc.yaml))
			var fe model.FieldErrors
			if !errors.As(err, &fe) {
				t.Fatalf("ParseScenario error = %v, want model.FieldErrors", err)
			}
			if tc.want == nil { // only the path is stable for parser messages
				if len(fe) != 1 || fe[0].Path != "body" {
					t.Errorf("errors = %v, want one at body", fe)
				}
				return
			}
			if diff := cmp.Diff(tc.want, fe); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParseScenario checks that parsing never panics, that every problem has
// a path, and that what parses survives a JSON round trip unchanged.
func FuzzParseScenario(f *testing.F) {
	if data, err := os.ReadFile("testdata/scenario.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(`{"clouds": {"aws": {"quota": {"*": 1}}}, "offers": [{"match": {"gpu": "H*"}, "capacity": 0}]}`))
	f.Add([]byte("offers:\n- match: {zone: '['}\n  fail: {probability: .5}\n"))
	f.Add([]byte("clouds: {x: {bootDelay: {min: 3d, max: 1e3}}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseScenario(data)
		if err != nil {
			var fe model.FieldErrors
			if !errors.As(err, &fe) || len(fe) == 0 {
				t.Fatalf("error %v is not a non-empty model.FieldErrors", err)
			}
			for _, e := range fe {
				if e.Path == "" || e.Message == "" {
					t.Fatalf("problem without path or message: %+v", e)
				}
			}
			return
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", s, err)
		}
		again, err := ParseScenario(out)
		if err != nil {
			t.Fatalf("ParseScenario(%s) after a round trip: %v", out, err)
		}
		if diff := cmp.Diff(s, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip through %s (-first +second):\n%s", out, diff)
		}
	})
}
