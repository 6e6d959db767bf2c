package manifest

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestSplitYAML(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		data string
		want []string
		err  bool
	}{
		"one":                 {data: "a: 1\n", want: []string{"a: 1\n"}},
		"no final newline":    {data: "a: 1", want: []string{"a: 1"}},
		"two":                 {data: "a: 1\n---\nb: 2\n", want: []string{"a: 1\n", "---\nb: 2\n"}},
		"leading marker":      {data: "---\na: 1\n", want: []string{"---\na: 1\n"}},
		"leading comments":    {data: "# c\n---\na: 1\n", want: []string{"# c\n---\na: 1\n"}},
		"directive":           {data: "%YAML 1.1\n---\na: 1\n", want: []string{"%YAML 1.1\n---\na: 1\n"}},
		"empty documents":     {data: "---\n---\n# only a comment\n---\na: 1\n---\n", want: []string{"---\na: 1\n"}},
		"content on marker":   {data: "--- |\n  text\n--- {a: 1}\n", want: []string{"--- |\n  text\n", "--- {a: 1}\n"}},
		"marker with comment": {data: "a: 1\n--- # next\nb: 2\n", want: []string{"a: 1\n", "--- # next\nb: 2\n"}},
		"CRLF":                {data: "a: 1\r\n---\r\nb: 2\r\n", want: []string{"a: 1\r\n", "---\r\nb: 2\r\n"}},
		"document end":        {data: "a: 1\n...\nb: 2\n", want: []string{"a: 1\n...\n", "b: 2\n"}},
		"not markers":         {data: "a: ---\nb: |\n  ---\n----\n", want: []string{"a: ---\nb: |\n  ---\n----\n"}},
		"nothing":             {data: "", err: true},
		"only comments":       {data: "# a\n\n  # b\n---\n...\n", err: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			docs, err := SplitYAML([]byte(tc.data))
			if (err != nil) != tc.err {
				t.Fatalf("SplitYAML error = %v, want error: %v", err, tc.err)
			}
			var got []string
			for _, d := range docs {
				got = append(got, string(d))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("SplitYAML (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInDocument(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in, want model.FieldErrors
	}{
		"none": {},
		"paths": {
			in: model.FieldErrors{
				{Path: "body", Message: "m1"},
				{Path: "spec.replicas", Message: "m2"},
				{Path: `["a.b"].c`, Message: "m3"},
			},
			want: model.FieldErrors{
				{Path: "[1]", Message: "m1"},
				{Path: "[1].spec.replicas", Message: "m2"},
				{Path: `[1]["a.b"].c`, Message: "m3"},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, InDocument(1, tc.in)); diff != "" {
				t.Errorf("InDocument (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSplitThenParse is how `gpufleet apply -f` reads a stream: split, parse
// each document, and report each one's problems under its index.
func TestSplitThenParse(t *testing.T) {
	t.Parallel()
	stream := readFile(t, "testdata/job.yaml")
	stream = append(stream, "\n---\napiVersion: gpufleet.dev/v1\nkind: Job\nspec: {replicas: -2, run: {command: [x]}}\n"...)
	docs, err := SplitYAML(stream)
	if err != nil {
		t.Fatal(err)
	}
	var got model.FieldErrors
	for i, doc := range docs {
		_, fe := ParseJob(doc, YAML, knownGPU)
		got = append(got, InDocument(i, fe)...)
	}
	want := model.FieldErrors{{Path: "[1].spec.replicas", Message: "must be ≥ 1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}
