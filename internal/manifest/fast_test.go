package manifest

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// exactOpts compare decoded values exactly: unlike fuzzOpts they tell a nil
// slice or map from an empty one, which encode differently.
var exactOpts = cmp.Options{
	cmp.AllowUnexported(sample{}),
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
}

// sameAsWalk decodes data into a T with the fast decoder and, if it
// accepts, with the walk; the walk must accept too, with an equal value.
// It returns whether the fast decoder accepted.
func sameAsWalk[T any](t *testing.T, data []byte) bool {
	t.Helper()
	var fast T
	if !decodeFast(data, reflect.ValueOf(&fast).Elem()) {
		return false
	}
	var slow T
	if fe := walk(data, reflect.ValueOf(&slow).Elem()); fe != nil {
		t.Fatalf("the fast decoder accepted %q, the walk reports %v", data, fe)
	}
	if diff := cmp.Diff(slow, fast, exactOpts); diff != "" {
		t.Fatalf("the fast decoder and the walk disagree on %q (-walk +fast):\n%s", data, diff)
	}
	return true
}

func TestDecodeFast(t *testing.T) {
	t.Parallel()
	job := string(readFile(t, "testdata/job.json"))
	tests := map[string]struct {
		body   string
		sample bool // decode into a sample, not a Job
		fast   bool // the fast decoder takes it, rather than leave it to the walk
	}{
		"job":                 {body: job, fast: true},
		"sample":              {body: sampleDoc, sample: true, fast: true},
		"sample interface":    {body: `{"extra": {"a": 1}}`, sample: true},
		"white space":         {body: " \r\n\t{ \"spec\" : { \"run\" : { \"command\" : [ \"a\" , \"b\" ] } } }\n", fast: true},
		"escaped key":         {body: `{"api\u0056ersion": "gpufleet.dev/v1", "kind": "J\u006fb"}`, fast: true},
		"unicode value":       {body: `{"metadata": {"tags": {"owner": "Zoë 🚀"}}}`, fast: true},
		"nulls":               {body: `{"metadata": null, "spec": {"earlyStop": null, "run": {"command": ["a", null], "env": {"A": null}}}}`, fast: true},
		"empty containers":    {body: `{"metadata": {"tags": {}}, "spec": {"run": {"command": [], "env": {}}, "after": []}}`, fast: true},
		"integral float":      {body: `{"spec": {"replicas": 2.0, "retries": {"failures": 1e1}}}`, fast: true},
		"bytes as number":     {body: `{"spec": {"resources": {"memory": 1e3}}}`, fast: true},
		"escaped duration":    {body: `{"spec": {"checkpoint": {"interval": "3\u0030m"}}}`, fast: true},
		"deadline":            {body: `{"spec": {"limits": {"deadline": "2026-12-24T00:00:00+01:00"}}}`, fast: true},
		"unknown field":       {body: `{"spec": {"resources": {"gpuz": 1}}}`},
		"field case":          {body: `{"APIVersion": "gpufleet.dev/v1"}`},
		"repeated key":        {body: `{"spec": {"queue": "a"}, "spec": {"priority": "b"}}`},
		"repeated map key":    {body: `{"metadata": {"tags": {"a": "1", "\u0061": "2"}}}`},
		"fractional integer":  {body: `{"spec": {"replicas": 2.5}}`},
		"number for a string": {body: `{"spec": {"queue": 1}}`},
		"quoted number":       {body: `{"spec": {"replicas": "2"}}`},
		"bad duration":        {body: `{"spec": {"checkpoint": {"interval": "soon"}}}`},
		"object for a unit":   {body: `{"spec": {"resources": {"memory": {"gi": 1}}}}`},
		"trailing data":       {body: `{} {}`},
		"trailing comma":      {body: `{"spec": {"run": {"command": ["a",]}}}`},
		"leading zero":        {body: `{"spec": {"replicas": 02}}`},
		"bare minus":          {body: `{"spec": {"replicas": -}}`},
		"control character":   {body: "{\"kind\": \"a\x01b\"}"},
		"invalid UTF-8":       {body: "{\"kind\": \"a\xffb\"}", fast: true}, // as U+FFFD, like encoding/json
		"null document":       {body: `null`},
		"empty":               {body: ``},
		"array document":      {body: `[]`},
		"unterminated":        {body: `{"spec": {"run": {"command": ["a"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			decode := sameAsWalk[Job]
			if tc.sample {
				decode = sameAsWalk[sample]
			}
			if got := decode(t, []byte(tc.body)); got != tc.fast {
				t.Errorf("fast decoder accepted = %t, want %t", got, tc.fast)
			}
		})
	}
}

// sampleDoc sets every field of sample, each in a form the fast decoder
// takes.
const sampleDoc = `{"id": "i", "level": 2, "ref": "r", "name": "n", "count": -3, "size": 1e3, "ratio": 0.5, "on": true,
	"ptr": 7, "machines": [{"host": "a", "gpus": 8}, {"host": "b"}], "zones": {"a.b": {"host": "b"}, "c": {}},
	"memory": "40Gi", "every": "3d", "at": "2026-12-24T00:00:00+01:00", "addr": "::1", "blob": "aGk=", "Untagged": "u",
	"extra": null}`

// FuzzFastDecode checks the fast decoder's invariant: whatever it accepts,
// the walk accepts too and decodes to an equal value. Its seeds include
// FuzzDecodeJSON's corpus.
func FuzzFastDecode(f *testing.F) {
	f.Add(readFile(f, "testdata/job.json"))
	f.Add([]byte(sampleDoc))
	f.Add([]byte(`{"spec": {"run": {"command": ["a\"b", "c\\d", "\u00e9"]}, "nodeSelector": {"k": "v"}}}`))
	f.Add([]byte(`{"machines": [[], {}], "zones": {"a": null}, "blob": "!!", "at": "2026-12-24T00:00:00\u005a"}`))
	for _, data := range corpus(f, "testdata/fuzz/FuzzDecodeJSON") {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameAsWalk[Job](t, data)
		sameAsWalk[sample](t, data)
	})
}

// corpus reads the []byte inputs of a fuzz corpus directory.
func corpus(tb testing.TB, dir string) [][]byte {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			tb.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if q, ok := strings.CutPrefix(line, "[]byte("); ok {
				s, err := strconv.Unquote(strings.TrimSuffix(q, ")"))
				if err != nil {
					tb.Fatalf("%s: %v", name, err)
				}
				out = append(out, []byte(s))
			}
		}
	}
	return out
}

func BenchmarkDecodeFastJob(b *testing.B) {
	data := readFile(b, "testdata/job.json")
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		var j Job
		if !decodeFast(data, reflect.ValueOf(&j).Elem()) {
			b.Fatal("the fast decoder gave up on testdata/job.json")
		}
	}
}
