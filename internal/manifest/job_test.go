package manifest

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

// designJob is testdata/job.yaml, the job in DESIGN.md §2, as ParseJob
// returns it.
func designJob() *Job {
	deadline := time.Date(2026, 12, 24, 0, 0, 0, 0, time.UTC)
	return &Job{
		APIVersion: APIVersion,
		Kind:       "Job",
		Metadata: Metadata{
			Name:    "llama-ft",
			Project: "nlp",
			Tags:    map[string]string{"team": "nlp", "experiment": "lr-sweep"},
		},
		Spec: model.JobSpec{
			Queue:    "research",
			Priority: "normal",
			Replicas: 2,
			Resources: model.Resources{
				GPUs: 8,
				GPU: model.GPURequest{
					Models:       []string{"H100", "A100-80GB"},
					MinMemory:    40 * model.GiB,
					Interconnect: "nvlink",
				},
				CPU:    32,
				Memory: 256 * model.GiB,
			},
			Run: model.RunSpec{
				Command: []string{"torchrun", "train.py"},
				Workdir: ".",
				Env:     map[string]string{"LR": "3e-4"},
			},
			Spot:            model.SpotAllowed,
			MaxPricePerHour: 40,
			Regions:         model.RegionPolicy{Allow: []string{"eu-*"}},
			Checkpoint: model.Checkpoint{
				Interval: model.Duration(30 * time.Minute),
				Signal:   "SIGTERM",
				Grace:    model.Duration(120 * time.Second),
			},
			Retries:   model.RetryPolicy{Failures: 2, Preemptions: 10, OnDemandAfterPreemptions: 3},
			Limits:    model.Limits{Runtime: model.Duration(12 * time.Hour), Deadline: &deadline},
			Estimate:  model.Estimate{Runtime: model.Duration(6 * time.Hour)},
			EarlyStop: &model.EarlyStop{Policy: "plateau", Metric: "val_loss", Patience: 3, MinDelta: 0.01, Mode: "stop"},
		},
	}
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// knownGPU stands in for the catalog.
func knownGPU(m string) bool { return m == "H100" || m == "A100-80GB" || m == "L4" }

func TestParseJobDesignExample(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file   string
		format Format
	}{
		{"testdata/job.yaml", YAML},
		{"testdata/job.yaml", Auto},
		{"testdata/job.json", JSON},
		{"testdata/job.json", Auto},
	} {
		name := tc.file + "/" + [...]string{"auto", "json", "yaml"}[tc.format]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, fe := ParseJob(readFile(t, tc.file), tc.format, knownGPU)
			if fe != nil {
				t.Fatalf("ParseJob: %v", fe)
			}
			if diff := cmp.Diff(designJob(), got); diff != "" {
				t.Errorf("ParseJob (-want +got):\n%s", diff)
			}
		})
	}
}

func defaulted(s model.JobSpec) model.JobSpec {
	s.Default()
	return s
}

// minimal is the least a valid job says.
const minimal = `{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "spec": {"run": {"command": ["true"]}}}`

func TestParseJob(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		body   string
		format Format
		want   *Job
		errs   model.FieldErrors
	}{
		"defaults applied": {
			body: minimal,
			want: &Job{APIVersion: APIVersion, Kind: "Job", Spec: defaulted(model.JobSpec{Run: model.RunSpec{Command: []string{"true"}}})},
		},
		"every problem at once": {
			body: `{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "spec": {
				"replicas": "two",
				"resources": {"gpus": -1, "gpuz": 1, "gpu": {"models": ["H100", "B300"]}},
				"run": {"command": []}}}`,
			errs: model.FieldErrors{
				{Path: "spec.replicas", Message: "want an integer, got string"},
				{Path: "spec.resources.gpu.models[1]", Message: `unknown GPU model "B300" (see ` + "`gpufleet offers`" + ` for the catalog's models)`},
				{Path: "spec.resources.gpus", Message: "must be ≥ 0"},
				{Path: "spec.resources.gpuz", Message: `unknown field (did you mean "gpus"?)`},
				{Path: "spec.run.command", Message: "must not be empty: give the program to run and its arguments"},
			},
		},
		"every problem at once in YAML": {
			body: "apiVersion: gpufleet.dev/v1\nkind: Job\nspec:\n  replicas: two\n  resources: {gpus: -1, gpuz: 1}\n  run: {command: []}\n",
			errs: model.FieldErrors{
				{Path: "spec.replicas", Message: "want an integer, got string"},
				{Path: "spec.resources.gpus", Message: "must be ≥ 0"},
				{Path: "spec.resources.gpuz", Message: `unknown field (did you mean "gpus"?)`},
				{Path: "spec.run.command", Message: "must not be empty: give the program to run and its arguments"},
			},
		},
		"unit errors at their paths": {
			body: `{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "spec": {"resources": {"memory": "lots", "gpu": {"minMemory": "-1Gi"}},
				"run": {"command": ["x"]}, "checkpoint": {"interval": 30, "grace": "2 minutes"}, "limits": {"deadline": "tomorrow"}}}`,
			errs: model.FieldErrors{
				{Path: "spec.checkpoint.grace", Message: `"2 minutes" is not a duration (want e.g. 90s, 30m, 12h, 7d)`},
				{Path: "spec.checkpoint.interval", Message: `want a duration string such as "30m"`},
				{Path: "spec.limits.deadline", Message: `want an RFC 3339 time such as "2026-12-24T00:00:00Z", got "tomorrow"`},
				{Path: "spec.resources.gpu.minMemory", Message: `"-1Gi" is negative`},
				{Path: "spec.resources.memory", Message: `"lots" is not a quantity (want a number with an optional suffix Ki, Mi, Gi, Ti, k, M, G, T)`},
			},
		},
		"restart time out of range": {
			body: `{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "spec": {"run": {"command": ["x"]}, "checkpoint": {"restart": "48h"}}}`,
			errs: model.FieldErrors{{Path: "spec.checkpoint.restart", Message: "must be between 0 (the pool's restart time, else 5m) and 24h"}},
		},
		"validation does not repeat a decode error": {
			body: `{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "spec": {"run": {"command": "python train.py"}}}`,
			errs: model.FieldErrors{{Path: "spec.run.command", Message: "want an array, got string"}},
		},
		"header": {
			body: `{"apiVersion": "v1", "kind": "NodePool", "spec": {"run": {"command": ["true"]}}}`,
			errs: model.FieldErrors{
				{Path: "apiVersion", Message: `must be gpufleet.dev/v1, got "v1"`},
				{Path: "kind", Message: `must be Job, got "NodePool"`},
			},
		},
		"missing header": {
			body: `{"spec": {"run": {"command": ["true"]}}}`,
			errs: model.FieldErrors{
				{Path: "apiVersion", Message: "must be gpufleet.dev/v1"},
				{Path: "kind", Message: "must be Job"},
			},
		},
		"metadata": {
			body: `{"apiVersion": "gpufleet.dev/v1", "kind": "Job",
				"metadata": {"name": "Llama_FT", "project": "-nlp", "tags": {"a.b": "ok", "bad key": "x", "team": "nl\u0000p"}},
				"spec": {"run": {"command": ["true"]}}}`,
			errs: model.FieldErrors{
				{Path: "metadata.name", Message: dnsLabelRule},
				{Path: "metadata.project", Message: dnsLabelRule},
				{Path: "metadata.tags.team", Message: "tag value must be at most 255 printable characters"},
				{Path: `metadata.tags["bad key"]`, Message: "tag key must be 1 to 63 letters, digits, '.', '_', '-' or '/', starting with a letter or digit"},
			},
		},
		"not a document": {
			body: `{"apiVersion": "gpufleet.dev/v1",, "kind": "Job"}`,
			errs: model.FieldErrors{{Path: "body", Message: "not valid JSON: invalid character ',' looking for beginning of object key string at line 1, column 34 (byte 33)"}},
		},
		"not an object": {
			body: `["Job"]`,
			errs: model.FieldErrors{{Path: "body", Message: "want an object, got array"}},
		},
		"YAML read as YAML when asked": {
			body:   `{apiVersion: gpufleet.dev/v1, kind: Job, spec: {run: {command: ["true"]}}}`,
			format: YAML,
			want:   &Job{APIVersion: APIVersion, Kind: "Job", Spec: defaulted(model.JobSpec{Run: model.RunSpec{Command: []string{"true"}}})},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, errs := ParseJob([]byte(tc.body), tc.format, knownGPU)
			if diff := cmp.Diff(tc.errs, errs); diff != "" {
				t.Errorf("ParseJob errors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseJob job (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMetadataValidate(t *testing.T) {
	t.Parallel()
	tooMany := map[string]string{}
	for i := range maxTags + 1 {
		tooMany["k"+strings.Repeat("x", i)] = "v"
	}
	tests := map[string]struct {
		meta Metadata
		errs model.FieldErrors
	}{
		"empty":         {},
		"longest name":  {meta: Metadata{Name: strings.Repeat("a", 63), Project: "a-1"}},
		"long name":     {meta: Metadata{Name: strings.Repeat("a", 64)}, errs: model.FieldErrors{{Path: "m.name", Message: dnsLabelRule}}},
		"trailing dash": {meta: Metadata{Project: "nlp-"}, errs: model.FieldErrors{{Path: "m.project", Message: dnsLabelRule}}},
		"tag key forms": {meta: Metadata{Tags: map[string]string{"gpufleet.dev/team": "nlp", "Cost_Center-2": "A b: +=@"}}},
		"tag value too long": {
			meta: Metadata{Tags: map[string]string{"k": strings.Repeat("é", 256)}},
			errs: model.FieldErrors{{Path: "m.tags.k", Message: "tag value must be at most 255 printable characters"}},
		},
		"tag key too long": {
			meta: Metadata{Tags: map[string]string{strings.Repeat("k", 64): ""}},
			errs: model.FieldErrors{{Path: "m.tags." + strings.Repeat("k", 64), Message: "tag key must be 1 to 63 letters, digits, '.', '_', '-' or '/', starting with a letter or digit"}},
		},
		"empty tag key": {
			meta: Metadata{Tags: map[string]string{"": "v"}},
			errs: model.FieldErrors{{Path: `m.tags[""]`, Message: "tag key must be 1 to 63 letters, digits, '.', '_', '-' or '/', starting with a letter or digit"}},
		},
		"too many tags": {meta: Metadata{Tags: tooMany}, errs: model.FieldErrors{{Path: "m.tags", Message: "has 51 tags; at most 50 are allowed"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.errs, tc.meta.Validate("m")); diff != "" {
				t.Errorf("Validate (-want +got):\n%s", diff)
			}
		})
	}
}

func BenchmarkParseJob(b *testing.B) {
	for _, file := range []string{"testdata/job.json", "testdata/job.yaml"} {
		data := readFile(b, file)
		b.Run(file, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, fe := ParseJob(data, Auto, knownGPU); fe != nil {
					b.Fatal(fe)
				}
			}
		})
	}
}
