package manifest

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufleet/gpufleet/internal/model"
)

var fuzzOpts = cmp.Options{
	cmpopts.EquateEmpty(),
	cmp.AllowUnexported(sample{}),
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
}

// FuzzDecodeJSON checks that decoding never panics, that what decodes
// without problems survives a round trip through encoding/json, and that it
// means what encoding/json takes it to mean.
func FuzzDecodeJSON(f *testing.F) {
	f.Add(readFile(f, "testdata/job.json"))
	f.Add([]byte(`{"id": "i", "level": 2, "ref": "r", "count": 3.0, "size": 1e3, "ratio": 0.5, "ptr": 7,
		"machines": [{"host": "a", "gpus": 8}], "zones": {"a.b": {"host": "b"}}, "extra": {"a": [1, "x", true, null]},
		"memory": "40Gi", "every": "3d", "at": "2026-12-24T00:00:00+01:00", "addr": "::1", "blob": "aGk="}`))
	f.Add([]byte(`{"spec": {"resources": {"gpuz": 1}, "run": {"env": {"a.b": 1}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip[Job](t, data)
		roundTrip[sample](t, data)
	})
}

func roundTrip[T any](t *testing.T, data []byte) {
	var got T
	fe := DecodeJSON(data, &got)
	checkErrors(t, fe)
	if fe != nil {
		return
	}
	out, err := json.Marshal(&got)
	if err != nil {
		t.Fatalf("Marshal(%#v): %v", got, err)
	}
	var again T
	if fe := DecodeJSON(out, &again); fe != nil {
		t.Fatalf("DecodeJSON(%s) after a round trip: %v", out, fe)
	}
	if diff := cmp.Diff(got, again, fuzzOpts); diff != "" {
		t.Fatalf("round trip through %s (-first +second):\n%s", out, diff)
	}
	// encoding/json merges duplicate objects where DecodeJSON keeps the
	// last, and rejects some values DecodeJSON accepts (3.0 for an int,
	// null for a model.Bytes); where both accept, they must agree.
	var std T
	if hasDuplicateKeys(data) || json.Unmarshal(data, &std) != nil {
		return
	}
	if diff := cmp.Diff(std, got, fuzzOpts); diff != "" {
		t.Fatalf("encoding/json and DecodeJSON disagree (-std +got):\n%s", diff)
	}
}

// checkErrors checks what every problem list must be: sorted, each problem
// with a path and a message.
func checkErrors(t *testing.T, fe model.FieldErrors) {
	t.Helper()
	if !slices.IsSortedFunc(fe, func(a, b model.FieldError) int { return strings.Compare(a.Path, b.Path) }) {
		t.Errorf("problems not sorted by path: %v", fe)
	}
	for _, e := range fe {
		if e.Path == "" || e.Message == "" {
			t.Errorf("problem without a path or message: %#v", e)
		}
	}
}

// hasDuplicateKeys reports whether an object in the valid JSON data
// repeats a key.
func hasDuplicateKeys(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	var value func() bool // reads one value, reporting a repeated key in it
	value = func() bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, _ := dec.Token()
				if seen[k.(string)] || value() {
					return true
				}
				seen[k.(string)] = true
			}
			dec.Token()
		case json.Delim('['):
			for dec.More() {
				if value() {
					return true
				}
			}
			dec.Token()
		}
		return false
	}
	return value()
}

// FuzzParseJob checks that parsing never panics and that a job it accepts
// reads back the same after encoding it as JSON.
func FuzzParseJob(f *testing.F) {
	f.Add(readFile(f, "testdata/job.yaml"), uint8(Auto))
	f.Add(readFile(f, "testdata/job.json"), uint8(JSON))
	f.Add([]byte(minimal), uint8(YAML))
	f.Add([]byte("apiVersion: gpufleet.dev/v1\nkind: Job\nspec:\n  replicas: two\n  run: {command: []}\n---\nkind: Job\n"), uint8(YAML))
	f.Fuzz(func(t *testing.T, data []byte, format uint8) {
		job, fe := ParseJob(data, Format(format%3), nil)
		checkErrors(t, fe)
		if (job == nil) == (fe == nil) {
			t.Fatalf("ParseJob = %v, %v: want a job or problems", job, fe)
		}
		if job == nil {
			return
		}
		out, err := json.Marshal(job)
		if err != nil {
			t.Fatalf("Marshal(%#v): %v", job, err)
		}
		again, fe := ParseJob(out, JSON, nil)
		if fe != nil {
			t.Fatalf("ParseJob(%s) after a round trip: %v", out, fe)
		}
		if diff := cmp.Diff(job, again, fuzzOpts); diff != "" {
			t.Fatalf("round trip through %s (-first +second):\n%s", out, diff)
		}
	})
}
