package manifest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func knownTestGPU(name string) bool { return name == "H100" || name == "A100-80GB" }

const (
	goodPool = `apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: h100}
spec:
  provider: sim
  sim: {clouds: [aws]}
  requirements: {gpuModels: [H100], gpusPerNode: 8}
  capacityTypes: [spot, on-demand]
  min: 1
  max: 4
`
	goodQueue = `apiVersion: gpufleet.dev/v1
kind: Queue
metadata: {name: research}
spec: {cohort: ml, quota: {H100: {nominal: 8}}}
`
	goodProject = `apiVersion: gpufleet.dev/v1
kind: Project
metadata: {name: nlp}
spec: {quota: {H100: 16}, maxGPUsPerJob: 8}
`
)

func TestParseFleet(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		files map[string]string // name → content; parsed in name order
		want  model.FieldErrors
		// wantNames lists kind/name of the parsed set when want is empty.
		wantNames []string
	}{
		"multi-doc and multi-file": {
			files:     map[string]string{"a.yaml": goodPool + "---\n" + goodQueue, "b.json": `[` + jsonProject + `]`},
			wantNames: []string{"NodePool/h100", "Queue/research", "Project/nlp"},
		},
		"field paths carry file and document": {
			files: map[string]string{
				"a.yaml": goodQueue + "---\n" + strings.Replace(strings.Replace(goodPool, "min: 1", "min: -1", 1), "max: 4", "max: 4\n  maxx: 3", 1),
			},
			want: model.FieldErrors{
				{Path: "a.yaml[1].spec.maxx", Message: `unknown field (did you mean "max"?)`},
				{Path: "a.yaml[1].spec.min", Message: "must be between 0 and 100000"},
			},
		},
		"unknown kind and bad header": {
			files: map[string]string{"a.yaml": "apiVersion: v2\nkind: Pool\n---\napiVersion: gpufleet.dev/v1\nkind: Job\n"},
			want: model.FieldErrors{
				{Path: "a.yaml[0].kind", Message: `must be NodePool, Queue, Project, Budget, PriorityClass or Notification, got "Pool"`},
				{Path: "a.yaml[1].kind", Message: "Job manifests are submitted with `gpufleet run -f`, not declared in the fleet"},
			},
		},
		"duplicate names per kind, across files": {
			files: map[string]string{"a.yaml": goodQueue, "b.yaml": goodPool + "---\n" + goodQueue},
			want: model.FieldErrors{
				{Path: "b.yaml[1].metadata.name", Message: `Queue "research" is already declared at a.yaml[0]`},
			},
		},
		"static pool checks machines and defaults min/max": {
			files: map[string]string{"s.yaml": `apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: owned}
spec:
  provider: static
  sim: {clouds: [aws]}
  static:
    machines:
      - {name: a, address: "10.0.0.1", gpus: 8xH100, pricePerHour: 5}
      - {name: a, address: "", gpus: 8xB999, pricePerHour: -1}
`},
			want: model.FieldErrors{
				{Path: "s.yaml[0].spec.sim", Message: `is set but the provider is "static"`},
				{Path: "s.yaml[0].spec.static.machines[1].address", Message: "is required (host:port of the machine's agent, or its host name)"},
				{Path: "s.yaml[0].spec.static.machines[1].gpus", Message: `unknown GPU model "B999" (see ` + "`gpufleet offers`" + ` for the catalog's models)`},
				{Path: "s.yaml[0].spec.static.machines[1].name", Message: `"a" is also machine 0`},
				{Path: "s.yaml[0].spec.static.machines[1].pricePerHour", Message: "must be a non-negative number of USD per hour"},
			},
		},
		"missing name and max below min": {
			files: map[string]string{"p.yaml": "apiVersion: gpufleet.dev/v1\nkind: NodePool\nspec: {provider: local, min: 3, max: 2}\n"},
			want: model.FieldErrors{
				{Path: "p.yaml[0].metadata.name", Message: "is required"},
				{Path: "p.yaml[0].spec.max", Message: "must be at least min (3)"},
			},
		},
		"not YAML": {
			files: map[string]string{"x.yaml": "kind: [\n"},
			want:  model.FieldErrors{{Path: "x.yaml[0]", Message: "not valid YAML: line 1: did not find expected node content"}},
		},
		"project problems": {
			files: map[string]string{"p.yaml": "apiVersion: gpufleet.dev/v1\nkind: Project\nmetadata: {name: nlp}\nspec: {quota: {B999: 1}, allowedRegions: ['[']}\n"},
			want: model.FieldErrors{
				{Path: "p.yaml[0].spec.allowedRegions[0]", Message: `"[" is not a region or shell pattern such as eu-*`},
				{Path: `p.yaml[0].spec.quota["B999"]`, Message: `unknown GPU model "B999" (use a catalog model or "*")`},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for f, content := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			set, fe, err := ParseDocuments([]string{dir}, driverChecks)
			if err != nil {
				t.Fatal(err)
			}
			for i := range fe {
				fe[i].Path = strings.TrimPrefix(fe[i].Path, dir+string(filepath.Separator))
				fe[i].Message = strings.ReplaceAll(fe[i].Message, dir+string(filepath.Separator), "")
			}
			if diff := cmp.Diff(tc.want, fe); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
			if len(tc.want) > 0 {
				if set != nil {
					t.Errorf("got a set despite problems")
				}
				return
			}
			var names []string
			for _, p := range set.NodePools {
				names = append(names, "NodePool/"+p.Metadata.Name)
			}
			for _, q := range set.Queues {
				names = append(names, "Queue/"+q.Metadata.Name)
			}
			for _, p := range set.Projects {
				names = append(names, "Project/"+p.Metadata.Name)
			}
			if diff := cmp.Diff(tc.wantNames, names); diff != "" {
				t.Errorf("declared (-want +got):\n%s", diff)
			}
		})
	}
}

const jsonProject = `{"apiVersion": "gpufleet.dev/v1", "kind": "Project", "metadata": {"name": "nlp"}, "spec": {"maxGPUsPerJob": 8}}`

// TestStoredRoundTrip: a set's canonical documents parse back to the same
// set and digest, whatever order the sources declared it in.
func TestStoredRoundTrip(t *testing.T) {
	t.Parallel()
	a, fe := Parse([]Source{{Name: "a", Data: []byte(goodQueue + "---\n" + goodPool + "---\n" + goodProject)}}, Checks{KnownGPU: knownTestGPU})
	if len(fe) > 0 {
		t.Fatal(fe)
	}
	b, fe := Parse([]Source{{Name: "b", Data: []byte(goodProject + "---\n" + goodPool)}, {Name: "c", Data: []byte(goodQueue)}}, Checks{KnownGPU: knownTestGPU})
	if len(fe) > 0 {
		t.Fatal(fe)
	}
	docsA, digestA := a.Documents()
	_, digestB := b.Documents()
	if digestA != digestB {
		t.Errorf("digests differ for equal sets: %s, %s", digestA, digestB)
	}
	back, err := ParseStored(docsA)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, back); diff != "" {
		t.Errorf("stored round trip (-want +got):\n%s", diff)
	}
}

// FuzzParseDocuments: no input panics Parse, and a set it accepts survives
// the store's round trip.
func FuzzParseDocuments(f *testing.F) {
	f.Add([]byte(goodPool + "---\n" + goodQueue + "---\n" + goodProject))
	f.Add([]byte(`[` + jsonProject + `, {"kind": "Queue"}]`))
	f.Add([]byte("apiVersion: gpufleet.dev/v1\nkind: NodePool\nmetadata: {name: s}\nspec: {provider: static, static: {machines: [{name: a, address: x, gpus: 2xH100}]}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		set, fe := Parse([]Source{{Name: "f", Data: data}}, Checks{KnownGPU: knownTestGPU})
		if len(fe) > 0 {
			if set != nil {
				t.Fatal("a set despite problems")
			}
			return
		}
		docs, digest := set.Documents()
		back, err := ParseStored(docs)
		if err != nil {
			t.Fatalf("stored documents do not parse: %v", err)
		}
		if _, d := back.Documents(); d != digest {
			t.Fatalf("digest changed over a round trip")
		}
	})
}
