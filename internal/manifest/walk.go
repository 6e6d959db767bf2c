package manifest

import (
	"encoding"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// decoder walks a generic JSON value, as encoding/json decodes it into an
// interface{} with UseNumber, against a Go value: it sets what fits and
// records every problem at its path. The Go value it writes to is always
// freshly zeroed, so leaving a field alone means "zero".
type decoder struct {
	path []step
	errs model.FieldErrors
	// lenient ignores unknown fields (LenientProblems).
	lenient bool
}

// step is one segment of the current path: an object key, or an array index
// when index ≥ 0.
type step struct {
	key   string
	index int
}

func (d *decoder) pushKey(k string) { d.path = append(d.path, step{key: k, index: -1}) }
func (d *decoder) pushIndex(i int)  { d.path = append(d.path, step{index: i}) }
func (d *decoder) pop()             { d.path = d.path[:len(d.path)-1] }

// fail records msg at the current path. Paths are rendered only here, so a
// valid document costs no path strings.
func (d *decoder) fail(msg string) {
	p := ""
	for _, s := range d.path {
		if s.index >= 0 {
			p += "[" + strconv.Itoa(s.index) + "]"
		} else {
			p = keyPath(p, s.key)
		}
	}
	if p == "" {
		p = bodyPath
	}
	d.errs.Add(p, msg)
}

// mismatch records that x is not the kind of JSON value the Go type needs.
func (d *decoder) mismatch(want string, x any) {
	d.fail("want " + want + ", got " + jsonKind(x))
}

func jsonKind(x any) string {
	switch x.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	default:
		return "object"
	}
}

// value decodes x into v.
func (d *decoder) value(x any, v reflect.Value) {
	if x == nil {
		return // null: v stays zero
	}
	info := infoOf(v.Type())
	switch {
	case info.unmarshaler:
		d.unmarshaler(x, v)
		return
	case info.textUnmarshaler:
		s, ok := x.(string)
		if !ok {
			d.mismatch("a string", x)
		} else if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			d.fail(err.Error())
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		d.value(x, p.Elem())
		v.Set(p)
	case reflect.Struct:
		d.object(x, v, info)
	case reflect.Map:
		d.mapValue(x, v)
	case reflect.Slice:
		d.slice(x, v)
	case reflect.Interface:
		if v.NumMethod() > 0 {
			d.fail(fmt.Sprintf("cannot decode into Go type %s", v.Type()))
			return
		}
		v.Set(reflect.ValueOf(d.plain(x)))
	case reflect.String:
		switch x := x.(type) {
		case string:
			v.SetString(x)
		case bool, json.Number:
			d.fail("want a string, got " + jsonKind(x) + "; quote it")
		default:
			d.mismatch("a string", x)
		}
	case reflect.Bool:
		b, ok := x.(bool)
		if !ok {
			d.mismatch("true or false", x)
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		d.integer(x, v)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		d.unsigned(x, v)
	case reflect.Float32, reflect.Float64:
		n, ok := x.(json.Number)
		if !ok {
			d.mismatch("a number", x)
			return
		}
		f, err := strconv.ParseFloat(string(n), v.Type().Bits())
		if err != nil {
			d.fail(string(n) + " is out of range")
			return
		}
		v.SetFloat(f)
	default:
		d.fail(fmt.Sprintf("cannot decode into Go type %s", v.Type()))
	}
}

// unmarshaler hands x, re-encoded, to v's UnmarshalJSON and reports its error
// at the current path.
func (d *decoder) unmarshaler(x any, v reflect.Value) {
	raw, err := json.Marshal(x)
	if err == nil {
		err = v.Addr().Interface().(json.Unmarshaler).UnmarshalJSON(raw)
	}
	if err == nil {
		return
	}
	if v.Type() == timeType {
		// time.Time's own errors quote Go layouts; say what to write instead.
		got := jsonKind(x)
		if s, ok := x.(string); ok {
			got = strconv.Quote(s)
		}
		d.fail("want an RFC 3339 time such as \"2026-12-24T00:00:00Z\", got " + got)
		return
	}
	d.fail(err.Error())
}

var timeType = reflect.TypeFor[time.Time]()

func (d *decoder) object(x any, v reflect.Value, info *typeInfo) {
	obj, ok := x.(map[string]any)
	if !ok {
		d.mismatch("an object", x)
		return
	}
	for k, xv := range obj {
		d.pushKey(k)
		if f, ok := info.fields[k]; ok {
			d.value(xv, fieldByIndex(v, f.index))
		} else if !d.lenient {
			d.fail("unknown field" + info.suggest(k))
		}
		d.pop()
	}
}

// fieldByIndex is reflect.Value.FieldByIndex, allocating embedded pointers
// on the way.
func fieldByIndex(v reflect.Value, index []int) reflect.Value {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v
}

func (d *decoder) mapValue(x any, v reflect.Value) {
	t := v.Type()
	if t.Key().Kind() != reflect.String {
		d.fail(fmt.Sprintf("cannot decode into Go type %s: map keys must be strings", t))
		return
	}
	obj, ok := x.(map[string]any)
	if !ok {
		d.mismatch("an object", x)
		return
	}
	m := reflect.MakeMapWithSize(t, len(obj))
	for k, xv := range obj {
		d.pushKey(k)
		e := reflect.New(t.Elem()).Elem()
		d.value(xv, e)
		m.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), e)
		d.pop()
	}
	v.Set(m)
}

func (d *decoder) slice(x any, v reflect.Value) {
	if v.Type().Elem().Kind() == reflect.Uint8 {
		d.bytes(x, v)
		return
	}
	arr, ok := x.([]any)
	if !ok {
		d.mismatch("an array", x)
		return
	}
	s := reflect.MakeSlice(v.Type(), len(arr), len(arr))
	for i, xe := range arr {
		d.pushIndex(i)
		d.value(xe, s.Index(i))
		d.pop()
	}
	v.Set(s)
}

// bytes decodes a []byte from base64, as encoding/json writes it.
func (d *decoder) bytes(x any, v reflect.Value) {
	s, ok := x.(string)
	if !ok {
		d.mismatch("a base64 string", x)
		return
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		d.fail("want a base64 string: " + err.Error())
		return
	}
	v.SetBytes(b)
}

// plain turns x into what encoding/json puts in an interface{}: numbers
// become float64.
func (d *decoder) plain(x any) any {
	switch x := x.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			d.fail(string(x) + " is out of range")
		}
		return f
	case []any:
		for i, e := range x {
			d.pushIndex(i)
			x[i] = d.plain(e)
			d.pop()
		}
	case map[string]any:
		for k, e := range x {
			d.pushKey(k)
			x[k] = d.plain(e)
			d.pop()
		}
	}
	return x
}

// integer decodes a signed integer.
func (d *decoder) integer(x any, v reflect.Value) {
	n, ok := x.(json.Number)
	if !ok {
		d.mismatch("an integer", x)
		return
	}
	i, msg := intOf(string(n))
	if msg == "" && v.OverflowInt(i) {
		msg = string(n) + " is out of range"
	}
	if msg != "" {
		d.fail(msg)
		return
	}
	v.SetInt(i)
}

// intOf converts the JSON number n to an int64, or says why it cannot. An
// integral number written with a fraction or exponent (3.0, 1e3) is
// accepted.
func intOf(n string) (int64, string) {
	i, err := strconv.ParseInt(n, 10, 64)
	if err == nil {
		return i, ""
	}
	f, ferr := strconv.ParseFloat(n, 64)
	switch {
	case ferr != nil || f < -0x1p63 || f >= 0x1p63:
		return 0, n + " is out of range"
	case f != math.Trunc(f):
		return 0, "want an integer, got " + n
	}
	return int64(f), ""
}

// unsigned is integer for unsigned Go types.
func (d *decoder) unsigned(x any, v reflect.Value) {
	n, ok := x.(json.Number)
	if !ok {
		d.mismatch("a non-negative integer", x)
		return
	}
	u, msg := uintOf(string(n))
	if msg == "" && v.OverflowUint(u) {
		msg = string(n) + " is out of range"
	}
	if msg != "" {
		d.fail(msg)
		return
	}
	v.SetUint(u)
}

// uintOf is intOf for unsigned integers.
func uintOf(n string) (uint64, string) {
	u, err := strconv.ParseUint(n, 10, 64)
	if err == nil {
		return u, ""
	}
	f, ferr := strconv.ParseFloat(n, 64)
	switch {
	case ferr != nil || f >= 0x1p64:
		return 0, n + " is out of range"
	case f < 0:
		return 0, "want a non-negative integer, got " + n
	case f != math.Trunc(f):
		return 0, "want an integer, got " + n
	}
	return uint64(f), ""
}
