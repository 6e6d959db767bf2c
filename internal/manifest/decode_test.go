package manifest

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

// sample exercises every kind of Go type the decoder serves.
type sample struct {
	Base
	inner
	*Ref
	Name     string             `json:"name"`
	Count    int8               `json:"count"`
	Size     uint16             `json:"size"`
	Ratio    float32            `json:"ratio"`
	On       bool               `json:"on"`
	Ptr      *int               `json:"ptr"`
	Machines []machine          `json:"machines"`
	Zones    map[string]machine `json:"zones"`
	Extra    any                `json:"extra"`
	Memory   model.Bytes        `json:"memory"`
	Every    model.Duration     `json:"every"`
	At       time.Time          `json:"at"`
	Addr     netip.Addr         `json:"addr"`
	Blob     []byte             `json:"blob"`
	Skipped  string             `json:"-"`
	Untagged string
}

// Base is embedded: its fields are promoted unless sample hides them.
type Base struct {
	ID     string `json:"id"`
	Hidden string `json:"name"` // hidden by sample.Name
}

// inner is embedded and unexported: its exported fields are still promoted.
type inner struct {
	Level int `json:"level"`
}

// Ref is embedded by pointer, allocated when one of its fields is set.
type Ref struct {
	RefID string `json:"ref"`
}

type machine struct {
	Host string `json:"host"`
	GPUs uint8  `json:"gpus,omitempty"`
}

// conflict embeds two structs whose fields clash at equal depth.
type conflict struct {
	left
	right
}

type left struct {
	A int
	X int
}

type right struct {
	A int
	Y int `json:"X"`
}

func intPtr(i int) *int { return &i }

func TestDecodeJSON(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		body string
		want sample
		errs model.FieldErrors
	}{
		"every field": {
			body: `{"id": "i", "level": 2, "ref": "r", "name": "n", "count": -3, "size": 65535, "ratio": 0.5, "on": true,
				"ptr": 7, "machines": [{"host": "a", "gpus": 8}], "zones": {"eu.west": {"host": "b"}},
				"extra": {"a": [1, "x", true, null]}, "memory": "40Gi", "every": "3d", "at": "2026-12-24T00:00:00Z",
				"addr": "10.0.0.1", "blob": "aGk=", "Untagged": "u"}`,
			want: sample{
				Base: Base{ID: "i"}, inner: inner{Level: 2}, Ref: &Ref{RefID: "r"},
				Name: "n", Count: -3, Size: 65535, Ratio: 0.5, On: true, Ptr: intPtr(7),
				Machines: []machine{{Host: "a", GPUs: 8}},
				Zones:    map[string]machine{"eu.west": {Host: "b"}},
				Extra:    map[string]any{"a": []any{1.0, "x", true, nil}},
				Memory:   40 * model.GiB,
				Every:    model.Duration(72 * time.Hour),
				At:       time.Date(2026, 12, 24, 0, 0, 0, 0, time.UTC),
				Addr:     netip.MustParseAddr("10.0.0.1"),
				Blob:     []byte("hi"),
				Untagged: "u",
			},
		},
		"null is the zero value": {
			body: `{"name": null, "ptr": null, "machines": null, "zones": null, "memory": null, "every": null, "at": null, "extra": null}`,
		},
		"integral numbers in other forms": {
			body: `{"count": 3.0, "size": 1e3, "ptr": -0}`,
			want: sample{Count: 3, Size: 1000, Ptr: intPtr(0)},
		},
		"numbers out of range": {
			body: `{"count": 128, "size": -1, "ratio": 1e39, "ptr": 1e19, "machines": [{"gpus": 256}], "extra": [1e400]}`,
			errs: model.FieldErrors{
				{Path: "count", Message: "128 is out of range"},
				{Path: "extra[0]", Message: "1e400 is out of range"},
				{Path: "machines[0].gpus", Message: "256 is out of range"},
				{Path: "ptr", Message: "1e19 is out of range"},
				{Path: "ratio", Message: "1e39 is out of range"},
				{Path: "size", Message: "want a non-negative integer, got -1"},
			},
		},
		"fractions where integers belong": {
			body: `{"count": 2.5, "size": 0.1}`,
			errs: model.FieldErrors{
				{Path: "count", Message: "want an integer, got 2.5"},
				{Path: "size", Message: "want an integer, got 0.1"},
			},
		},
		"wrong types": {
			body: `{"name": 5, "id": false, "on": "yes", "machines": {}, "zones": [], "count": "3", "size": true,
				"ratio": "x", "ptr": [], "blob": 1, "addr": 1, "level": {}}`,
			errs: model.FieldErrors{
				{Path: "addr", Message: "want a string, got number"},
				{Path: "blob", Message: "want a base64 string, got number"},
				{Path: "count", Message: "want an integer, got string"},
				{Path: "id", Message: "want a string, got boolean; quote it"},
				{Path: "level", Message: "want an integer, got object"},
				{Path: "machines", Message: "want an array, got object"},
				{Path: "name", Message: "want a string, got number; quote it"},
				{Path: "on", Message: "want true or false, got string"},
				{Path: "ptr", Message: "want an integer, got array"},
				{Path: "ratio", Message: "want a number, got string"},
				{Path: "size", Message: "want a non-negative integer, got boolean"},
				{Path: "zones", Message: "want an object, got array"},
			},
		},
		"unknown fields in slices and maps": {
			body: `{"machines": [{"host": "a"}, {"hots": "b"}], "zones": {"eu.west": {"host": "c", "gpuz": 1}, "us": {"GPUs": 2}},
				"Skipped": "x", "colour": 1}`,
			errs: model.FieldErrors{
				{Path: "Skipped", Message: "unknown field"},
				{Path: "colour", Message: "unknown field"},
				{Path: "machines[1].hots", Message: `unknown field (did you mean "host"?)`},
				{Path: "zones.us.GPUs", Message: `unknown field (did you mean "gpus"?)`},
				{Path: `zones["eu.west"].gpuz`, Message: `unknown field (did you mean "gpus"?)`},
			},
		},
		"unmarshaler errors at their paths": {
			body: `{"memory": "40Gx", "every": 30, "at": "tomorrow", "addr": "10.0.0", "blob": "!", "zones": {"z": {"host": "h"}},
				"machines": [{"host": "a"}], "extra": {"every": "x"}}`,
			errs: model.FieldErrors{
				{Path: "addr", Message: `ParseAddr("10.0.0"): IPv4 address too short`},
				{Path: "at", Message: `want an RFC 3339 time such as "2026-12-24T00:00:00Z", got "tomorrow"`},
				{Path: "blob", Message: "want a base64 string: illegal base64 data at input byte 0"},
				{Path: "every", Message: `want a duration string such as "30m"`},
				{Path: "memory", Message: `"40Gx" is not a quantity (want a number with an optional suffix Ki, Mi, Gi, Ti, k, M, G, T)`},
			},
		},
		"time of the wrong type": {
			body: `{"at": 5}`,
			errs: model.FieldErrors{{Path: "at", Message: `want an RFC 3339 time such as "2026-12-24T00:00:00Z", got number`}},
		},
		"not JSON": {
			body: "{\n  \"name\": \"x\"\n  \"id\": 1}",
			errs: model.FieldErrors{{Path: "body", Message: "not valid JSON: invalid character '\"' after object key:value pair at line 3, column 3 (byte 18)"}},
		},
		"YAML is not JSON": {
			body: "name: x",
			errs: model.FieldErrors{{Path: "body", Message: "not valid JSON: invalid character 'a' in literal null (expecting 'u') at line 1, column 2 (byte 1)"}},
		},
		"truncated": {
			body: `{"name": "x"`,
			errs: model.FieldErrors{{Path: "body", Message: "not valid JSON: unexpected end of input"}},
		},
		"trailing data": {
			body: "{}\n x",
			errs: model.FieldErrors{{Path: "body", Message: "not valid JSON: unexpected data after the document at line 2, column 2 (byte 4)"}},
		},
		"empty": {
			body: " \n",
			errs: model.FieldErrors{{Path: "body", Message: "is empty; want a JSON document"}},
		},
		"null": {
			body: "null",
			errs: model.FieldErrors{{Path: "body", Message: "is empty or null; want a document"}},
		},
		"not an object": {
			body: `"x"`,
			errs: model.FieldErrors{{Path: "body", Message: "want an object, got string"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got sample
			errs := DecodeJSON([]byte(tc.body), &got)
			if diff := cmp.Diff(tc.errs, errs); diff != "" {
				t.Errorf("DecodeJSON errors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(sample{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("DecodeJSON value (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeYAML(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		body string
		want sample
		errs model.FieldErrors
	}{
		"valid": {
			body: "# a sample\nname: x\ncount: 3\nmachines:\n- host: a\nmemory: 1Gi\n",
			want: sample{Name: "x", Count: 3, Machines: []machine{{Host: "a"}}, Memory: model.GiB},
		},
		"leading marker": {
			body: "---\nname: x\n",
			want: sample{Name: "x"},
		},
		"syntax error": {
			body: "name: [1,\n id: c",
			errs: model.FieldErrors{{Path: "body", Message: "not valid YAML: line 2: did not find expected ',' or ']'"}},
		},
		"duplicate keys": {
			body: "name: a\nid: b\nname: c\nid: d\n",
			errs: model.FieldErrors{{Path: "body", Message: `not valid YAML: line 3: key "name" already set in map; line 4: key "id" already set in map`}},
		},
		"several documents": {
			body: "name: a\n---\nname: b\n",
			errs: model.FieldErrors{{Path: "body", Message: "has 2 YAML documents; want one"}},
		},
		"empty": {
			body: "# nothing\n---\n",
			errs: model.FieldErrors{{Path: "body", Message: "is empty; want a YAML document"}},
		},
		"null": {
			body: "~\n",
			errs: model.FieldErrors{{Path: "body", Message: "is empty or null; want a document"}},
		},
		"infinity": {
			body: "ratio: .inf",
			errs: model.FieldErrors{{Path: "body", Message: "has a value JSON cannot carry: +Inf"}},
		},
		"YAML 1.1 booleans and numbers in strings": {
			body: "name: no\nid: 1.10\nzones: {z: {host: 'yes'}}",
			errs: model.FieldErrors{
				{Path: "id", Message: "want a string, got number; quote it"},
				{Path: "name", Message: "want a string, got boolean; quote it"},
			},
		},
		"unknown field": {
			body: "machines:\n- host: a\n  gpuz: 1\n",
			errs: model.FieldErrors{{Path: "machines[0].gpuz", Message: `unknown field (did you mean "gpus"?)`}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got sample
			errs := DecodeYAML([]byte(tc.body), &got)
			if diff := cmp.Diff(tc.errs, errs); diff != "" {
				t.Errorf("DecodeYAML errors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(sample{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("DecodeYAML value (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeHostileInput(t *testing.T) {
	t.Parallel()
	const laughs = `a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
`
	tests := map[string]struct {
		body   string
		format Format
		want   string
	}{
		"alias bomb":      {body: laughs, format: YAML, want: "not valid YAML: document contains excessive aliasing"},
		"deep YAML":       {body: strings.Repeat("{a: ", 20000), format: YAML, want: "not valid YAML: exceeded max depth of 10000"},
		"deep JSON":       {body: strings.Repeat("[", 20000), format: JSON, want: "not valid JSON: invalid character '[' exceeded max depth at line 1, column 10001 (byte 10000)"},
		"non-string keys": {body: "? [1, 2]\n: 3\n", format: YAML, want: "not valid YAML: invalid map key: []interface {}{1, 2}"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got sample
			errs := decodeInto([]byte(tc.body), tc.format, &got)
			if diff := cmp.Diff(model.FieldErrors{{Path: "body", Message: tc.want}}, errs); diff != "" {
				t.Errorf("decode (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeReplacesTargetOnlyOnSuccess(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		body string
		want machine
	}{
		"success replaces": {body: `{"gpus": 2}`, want: machine{GPUs: 2}},
		"failure keeps":    {body: `{"gpus": 2, "host": 1}`, want: machine{Host: "keep"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := machine{Host: "keep"}
			DecodeJSON([]byte(tc.body), &got)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(machine{})); diff != "" {
				t.Errorf("DecodeJSON (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeEmbeddedConflicts(t *testing.T) {
	t.Parallel()
	var got conflict
	errs := DecodeJSON([]byte(`{"A": 1, "X": 2}`), &got)
	want := model.FieldErrors{{Path: "A", Message: "unknown field"}}
	if diff := cmp.Diff(want, errs); diff != "" {
		t.Errorf("DecodeJSON errors (-want +got):\n%s", diff)
	}
	errs = DecodeJSON([]byte(`{"X": 2}`), &got)
	if diff := cmp.Diff(conflict{right: right{Y: 2}}, got, cmp.AllowUnexported(conflict{})); errs != nil || diff != "" {
		t.Errorf("DecodeJSON: %v (-want +got):\n%s", errs, diff)
	}
}

func TestSuggest(t *testing.T) {
	t.Parallel()
	info := infoOf(reflect.TypeFor[model.JobSpec]())
	tests := map[string]string{
		"Replicas":        ` (did you mean "replicas"?)`,
		"replcas":         ` (did you mean "replicas"?)`,
		"maxPricePerHr":   ` (did you mean "maxPricePerHour"?)`,
		"checkpoints":     ` (did you mean "checkpoint"?)`,
		"earlystopping":   "",
		"x":               "",
		"":                "",
		"completelyWrong": "",
		"long key":        "",
	}
	for key, want := range tests {
		t.Run(key, func(t *testing.T) {
			t.Parallel()
			if key == "long key" {
				key = strings.Repeat("replicas", 1<<17) // 1 MiB: must not cost a quadratic edit distance
			}
			if got := info.suggest(key); got != want {
				t.Errorf("suggest(%q) = %q, want %q", key, got, want)
			}
		})
	}
}

func TestKeyPath(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ path, key, want string }{
		"root":      {"", "spec", "spec"},
		"nested":    {"spec", "run", "spec.run"},
		"dotted":    {"spec.run.env", "a.b", `spec.run.env["a.b"]`},
		"empty key": {"tags", "", `tags[""]`},
		"quote":     {"tags", `a"b`, `tags["a\"b"]`},
		"root odd":  {"", "a b", `["a b"]`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := keyPath(tc.path, tc.key); got != tc.want {
				t.Errorf("keyPath(%q, %q) = %q, want %q", tc.path, tc.key, got, tc.want)
			}
		})
	}
}

func BenchmarkDecodeJob(b *testing.B) {
	data := readFile(b, "testdata/job.json")
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		var j Job
		if fe := DecodeJSON(data, &j); fe != nil {
			b.Fatal(fe)
		}
	}
}
