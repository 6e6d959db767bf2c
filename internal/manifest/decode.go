package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Format is the syntax of a document.
type Format int

const (
	// Auto, the zero value, reads JSON when the first byte that is not
	// white space is '{' or '[', and YAML otherwise.
	Auto Format = iota
	// JSON is a single JSON value.
	JSON
	// YAML is a single YAML document; see SplitYAML for several.
	YAML
)

// bodyPath is the path of problems with a document as a whole.
const bodyPath = "body"

// DecodeJSON decodes the single JSON value in data into v, which must be a
// non-nil pointer. It reports every problem (syntax, unknown fields, type
// mismatches, errors from json.Unmarshaler types) with its path. On success
// *v is replaced by the document, with fields it leaves out zero; on failure
// *v is unchanged.
func DecodeJSON(data []byte, v any) model.FieldErrors {
	return decodeInto(data, JSON, v)
}

// DecodeYAML is DecodeJSON for a single YAML document. YAML syntax errors,
// duplicate keys and several documents are reported at path "body", with a
// line number where the YAML parser gives one.
func DecodeYAML(data []byte, v any) model.FieldErrors {
	return decodeInto(data, YAML, v)
}

func decodeInto(data []byte, format Format, v any) model.FieldErrors {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic(fmt.Sprintf("manifest: decoding needs a non-nil pointer, got %T", v))
	}
	fresh := reflect.New(rv.Type().Elem())
	if fe := decode(data, format, fresh.Elem()); len(fe) > 0 {
		return fe
	}
	rv.Elem().Set(fresh.Elem())
	return nil
}

// decode decodes data into v, which must be settable and zero, as far as it
// can: a field with a problem is left zero and the rest is still set, so
// that callers can validate the rest. Problems come back sorted by path.
func decode(data []byte, format Format, v reflect.Value) model.FieldErrors {
	if format != JSON && format != YAML {
		format = sniff(data)
	}
	if format == YAML {
		var msg string
		if data, msg = yamlToJSON(data); msg != "" {
			return model.FieldErrors{{Path: bodyPath, Message: msg}}
		}
	}
	// A valid document, the common case, decodes without the generic
	// tree; anything else is decoded again by the walk, which reports
	// every problem with its path.
	if decodeFast(data, v) {
		return nil
	}
	v.SetZero()
	return walk(data, v)
}

// LenientProblems reports, with their paths, the problems that keep the
// JSON data from decoding into a value of v's type (a pointer), ignoring
// fields the type does not have. It is for messages decoded leniently with
// json.Unmarshal, such as the agent protocol's (a newer sender may add
// fields): when that fails, this says which field is at fault. It decodes
// into a value of its own and leaves v alone.
func LenientProblems(data []byte, v any) model.FieldErrors {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		panic(fmt.Sprintf("manifest: LenientProblems needs a pointer, got %T", v))
	}
	return walkWith(data, reflect.New(t.Elem()).Elem(), true)
}

// walk decodes the JSON data into v, which must be settable and zero,
// through a generic tree, reporting every problem with its path.
func walk(data []byte, v reflect.Value) model.FieldErrors {
	return walkWith(data, v, false)
}

func walkWith(data []byte, v reflect.Value, lenient bool) model.FieldErrors {
	x, msg := parseJSON(data)
	if msg != "" {
		return model.FieldErrors{{Path: bodyPath, Message: msg}}
	}
	if x == nil {
		return model.FieldErrors{{Path: bodyPath, Message: "is empty or null; want a document"}}
	}
	d := decoder{lenient: lenient}
	d.value(x, v)
	slices.SortStableFunc(d.errs, func(a, b model.FieldError) int { return strings.Compare(a.Path, b.Path) })
	return d.errs
}

func sniff(data []byte) Format {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		return JSON
	}
	return YAML
}

// parseJSON decodes data into a generic value, keeping numbers as written.
// It returns a message saying what is wrong and where when data is not one
// JSON value.
func parseJSON(data []byte) (any, string) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		var syn *json.SyntaxError
		switch {
		case errors.Is(err, io.EOF):
			return nil, "is empty; want a JSON document"
		case errors.As(err, &syn):
			// Offset counts the bytes read, the offending one included.
			return nil, "not valid JSON: " + syn.Error() + " " + position(data, syn.Offset-1)
		default: // io.ErrUnexpectedEOF
			return nil, "not valid JSON: unexpected end of input"
		}
	}
	if rest := bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return nil, "not valid JSON: unexpected data after the document " + position(data, int64(len(data)-len(rest)))
	}
	return x, ""
}

// position describes where byte i of data is, for a person with an editor.
func position(data []byte, i int64) string {
	before := data[:min(max(i, 0), int64(len(data)))]
	line := bytes.Count(before, []byte("\n")) + 1
	col := utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
	return fmt.Sprintf("at line %d, column %d (byte %d)", line, col, len(before))
}

// yamlToJSON converts one YAML document to JSON, or says why it cannot.
func yamlToJSON(data []byte) ([]byte, string) {
	docs, err := SplitYAML(data)
	switch {
	case err != nil:
		return nil, "is empty; want a YAML document"
	case len(docs) > 1:
		return nil, fmt.Sprintf("has %d YAML documents; want one", len(docs))
	}
	j, err := yaml.YAMLToJSONStrict(docs[0])
	if err == nil {
		return j, ""
	}
	var unsupported *json.UnsupportedValueError
	if errors.As(err, &unsupported) {
		return nil, "has a value JSON cannot carry: " + unsupported.Str
	}
	// yaml.v2 writes "yaml: line 3: …", or for duplicate keys
	// "yaml: unmarshal errors:\n  line 2: …\n  line 5: …".
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "unmarshal errors:\n"); ok {
		lines := strings.Split(rest, "\n")
		for i := range lines {
			lines[i] = strings.TrimSpace(lines[i])
		}
		msg = strings.Join(lines, "; ")
	}
	return nil, "not valid YAML: " + msg
}

// keyPath appends an object key to path: ".key" for keys made of letters,
// digits, '-' and '_', and `["key"]` for any other, so that a dot or
// bracket in a key cannot be misread.
func keyPath(path, key string) string {
	if !plainKey(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func plainKey(k string) bool {
	if k == "" {
		return false
	}
	for i := range len(k) {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
