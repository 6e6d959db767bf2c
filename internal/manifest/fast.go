package manifest

import (
	"encoding"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strconv"
	"unicode/utf8"
)

// fastDecoder decodes a JSON document straight into a Go value, without the
// generic tree the path-reporting walk (decoder) works on. It serves the
// common case, a valid document, and gives up at the first thing it is not
// sure the walk would accept unchanged: any syntax or type problem, an
// unknown or repeated key, a value for an interface{}, an object or array
// for a json.Unmarshaler, nesting deeper than maxFastDepth. Then the caller
// zeroes the target and runs the walk, which finds every problem and
// reports it with its path.
//
// Invariant (FuzzFastDecode): when decodeFast returns true, the walk would
// have decoded the same document without problems into an equal value.
type fastDecoder struct {
	data  []byte
	i     int // the next byte to read
	depth int
}

// maxFastDepth bounds the fast decoder's recursion; deeper documents take
// the walk (encoding/json allows 10,000 levels).
const maxFastDepth = 1000

// decodeFast decodes the single JSON value in data into v, which must be
// settable and zero. It reports whether it succeeded; when it did not, v
// may be partly set.
func decodeFast(data []byte, v reflect.Value) bool {
	d := fastDecoder{data: data}
	d.skipSpace()
	if d.i == len(d.data) || d.data[d.i] == 'n' {
		return false // empty or null: the walk says why
	}
	if !d.value(v) {
		return false
	}
	d.skipSpace()
	return d.i == len(d.data)
}

func (d *fastDecoder) skipSpace() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips white space and returns the next byte, or 0 at the end.
func (d *fastDecoder) next() byte {
	d.skipSpace()
	if d.i == len(d.data) {
		return 0
	}
	return d.data[d.i]
}

// literal consumes lit ("null", "true" or "false") if it comes next.
func (d *fastDecoder) literal(lit string) bool {
	if len(d.data)-d.i < len(lit) || string(d.data[d.i:d.i+len(lit)]) != lit {
		return false
	}
	d.i += len(lit)
	return true
}

// value decodes the next value into v, as decoder.value would.
func (d *fastDecoder) value(v reflect.Value) bool {
	switch d.next() {
	case 0:
		return false // the end, or a NUL byte
	case 'n':
		return d.literal("null") // null leaves v zero
	}
	info := infoOf(v.Type())
	switch {
	case info.unmarshaler:
		return d.unmarshaler(v)
	case info.textUnmarshaler:
		s, ok := d.str()
		return ok && v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)) == nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		if !d.value(p.Elem()) {
			return false
		}
		v.Set(p)
		return true
	case reflect.Struct:
		return d.object(v, info)
	case reflect.Map:
		return d.mapValue(v)
	case reflect.Slice:
		return d.slice(v)
	case reflect.String:
		s, ok := d.str()
		if ok {
			v.SetString(s)
		}
		return ok
	case reflect.Bool:
		switch {
		case d.literal("true"):
			v.SetBool(true)
		case d.literal("false"):
		default:
			return false
		}
		return true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := d.number()
		if !ok {
			return false
		}
		i, msg := intOf(n)
		if msg != "" || v.OverflowInt(i) {
			return false
		}
		v.SetInt(i)
		return true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n, ok := d.number()
		if !ok {
			return false
		}
		u, msg := uintOf(n)
		if msg != "" || v.OverflowUint(u) {
			return false
		}
		v.SetUint(u)
		return true
	case reflect.Float32, reflect.Float64:
		n, ok := d.number()
		if !ok {
			return false
		}
		f, err := strconv.ParseFloat(n, v.Type().Bits())
		if err != nil {
			return false
		}
		v.SetFloat(f)
		return true
	}
	return false // interface{} and the types the walk refuses
}

// unmarshaler hands the next value to v's UnmarshalJSON. The walk hands it
// the value re-encoded by encoding/json; for strings, numbers and booleans
// that is the text as written whenever the text is already in the form
// encoding/json writes, and a string is re-encoded when it is not. Objects
// and arrays, which the walk re-encodes with their keys sorted, are left to
// it.
func (d *fastDecoder) unmarshaler(v reflect.Value) bool {
	start := d.i
	var raw []byte
	switch c := d.data[start]; {
	case c == '"':
		s, ok := d.str()
		if !ok {
			return false
		}
		if raw = d.data[start:d.i]; !marshalsVerbatim(raw) {
			raw, _ = json.Marshal(s)
		}
	case c == 't' || c == 'f':
		if !d.literal("true") && !d.literal("false") {
			return false
		}
		raw = d.data[start:d.i]
	case c == '-' || '0' <= c && c <= '9':
		n, ok := d.number()
		if !ok {
			return false
		}
		raw = d.data[start : start+len(n)]
	default:
		return false
	}
	return v.Addr().Interface().(json.Unmarshaler).UnmarshalJSON(raw) == nil
}

// marshalsVerbatim reports whether the JSON string q (quotes included) is
// exactly what encoding/json writes for the string it holds: printable
// ASCII with no escapes and none of the characters it escapes for HTML.
func marshalsVerbatim(q []byte) bool {
	for _, c := range q[1 : len(q)-1] {
		if c < 0x20 || c >= 0x7f || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// object decodes a JSON object into the struct v.
func (d *fastDecoder) object(v reflect.Value, info *typeInfo) bool {
	if d.next() != '{' || d.depth >= maxFastDepth {
		return false
	}
	d.i++
	d.depth++
	// seen marks the fields set so far: a repeated key is the walk's
	// business (it keeps the last value; this decoder would merge).
	var small [2]uint64
	seen := small[:]
	if n := len(info.names); n > 64*len(small) {
		seen = make([]uint64, (n+63)/64)
	}
	if d.next() == '}' {
		d.i++
		d.depth--
		return true
	}
	for {
		key, ok := d.key()
		if !ok {
			return false
		}
		f, ok := info.fields[string(key)]
		if !ok || seen[f.pos/64]&(1<<(f.pos%64)) != 0 {
			return false
		}
		seen[f.pos/64] |= 1 << (f.pos % 64)
		if !d.value(fieldByIndex(v, f.index)) {
			return false
		}
		if done, ok := d.endOfMember('}'); !ok || done {
			d.depth--
			return ok
		}
	}
}

// key reads an object key and the colon after it. The key aliases the
// input when it needs no unquoting.
func (d *fastDecoder) key() ([]byte, bool) {
	if d.next() != '"' {
		return nil, false
	}
	start := d.i
	raw, plain, ok := d.scanString()
	if !ok {
		return nil, false
	}
	if !plain {
		var s string
		if json.Unmarshal(d.data[start:d.i], &s) != nil {
			return nil, false
		}
		raw = []byte(s)
	}
	if d.next() != ':' {
		return nil, false
	}
	d.i++
	return raw, true
}

// endOfMember reads the ',' between members or the closing byte; done is
// true after the closing byte.
func (d *fastDecoder) endOfMember(closing byte) (done, ok bool) {
	switch d.next() {
	case ',':
		d.i++
		return false, true
	case closing:
		d.i++
		return true, true
	}
	return false, false
}

// mapValue decodes a JSON object into the map v, whose keys must be
// strings.
func (d *fastDecoder) mapValue(v reflect.Value) bool {
	t := v.Type()
	if t.Key().Kind() != reflect.String || d.next() != '{' || d.depth >= maxFastDepth {
		return false
	}
	d.i++
	d.depth++
	if p, ok := v.Addr().Interface().(*map[string]string); ok {
		return d.stringMap(p)
	}
	m := reflect.MakeMap(t)
	// SetMapIndex copies k and e, so one of each serves every member.
	k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
	members := 0
	if d.next() == '}' {
		d.i++
		d.depth--
		v.Set(m)
		return true
	}
	for {
		key, ok := d.key()
		if !ok {
			return false
		}
		k.SetString(string(key))
		e.SetZero()
		if !d.value(e) {
			return false
		}
		m.SetMapIndex(k, e)
		members++
		if done, ok := d.endOfMember('}'); !ok || done {
			d.depth--
			if !ok || m.Len() != members {
				return false // a repeated key: see object
			}
			v.Set(m)
			return true
		}
	}
}

// stringMap decodes the object at d.i into a map[string]string without
// reflection, the commonest map in manifests (tags, environment).
func (d *fastDecoder) stringMap(p *map[string]string) bool {
	m := map[string]string{}
	members := 0
	if d.next() == '}' {
		d.i++
		d.depth--
		*p = m
		return true
	}
	for {
		key, ok := d.key()
		if !ok {
			return false
		}
		var e string
		if d.next() == 'n' {
			if !d.literal("null") {
				return false
			}
		} else if e, ok = d.str(); !ok {
			return false
		}
		m[string(key)] = e
		members++
		if done, ok := d.endOfMember('}'); !ok || done {
			d.depth--
			if !ok || len(m) != members {
				return false // a repeated key: see object
			}
			*p = m
			return true
		}
	}
}

// slice decodes a JSON array into the slice v, or base64 text into a byte
// slice.
func (d *fastDecoder) slice(v reflect.Value) bool {
	t := v.Type()
	if t.Elem().Kind() == reflect.Uint8 {
		s, ok := d.str()
		if !ok {
			return false
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return false
		}
		v.SetBytes(b)
		return true
	}
	if d.next() != '[' || d.depth >= maxFastDepth {
		return false
	}
	if p, ok := v.Addr().Interface().(*[]string); ok {
		return d.strings(p)
	}
	n := d.countElements()
	if n < 0 {
		return false
	}
	d.i++
	d.depth++
	s := reflect.MakeSlice(t, n, n) // [] is an empty slice, not nil
	for i := range n {
		if !d.value(s.Index(i)) {
			return false
		}
		if done, ok := d.endOfMember(']'); !ok || done != (i == n-1) {
			return false
		}
	}
	if n == 0 {
		if d.next() != ']' {
			return false
		}
		d.i++
	}
	d.depth--
	v.Set(s)
	return true
}

// strings decodes the array at d.i into a []string without reflection, the
// commonest slice in manifests.
func (d *fastDecoder) strings(p *[]string) bool {
	d.i++
	s := []string{}
	if d.next() == ']' {
		d.i++
		*p = s
		return true
	}
	for {
		if d.next() == 'n' {
			if !d.literal("null") {
				return false
			}
			s = append(s, "")
		} else {
			e, ok := d.str()
			if !ok {
				return false
			}
			s = append(s, e)
		}
		if done, ok := d.endOfMember(']'); !ok || done {
			*p = s[:len(s):len(s)]
			return ok
		}
	}
}

// countElements returns how many elements the array at d.i has, or -1 if
// it does not end. It checks only brackets and strings; the decode that
// follows checks the rest.
func (d *fastDecoder) countElements() int {
	depth, n, empty := 0, 0, true
	for j := d.i + 1; j < len(d.data); j++ {
		switch c := d.data[j]; c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			for j++; j < len(d.data) && d.data[j] != '"'; j++ {
				if d.data[j] == '\\' {
					j++
				}
			}
		case '[', '{':
			depth++
		case ']', '}':
			if depth == 0 {
				if empty {
					return 0
				}
				return n + 1
			}
			depth--
		case ',':
			if depth == 0 {
				n++
			}
		}
		empty = false
	}
	return -1
}

// str reads a JSON string.
func (d *fastDecoder) str() (string, bool) {
	if d.next() != '"' {
		return "", false
	}
	start := d.i
	raw, plain, ok := d.scanString()
	switch {
	case !ok:
		return "", false
	case plain:
		return string(raw), true
	}
	var s string
	if json.Unmarshal(d.data[start:d.i], &s) != nil {
		return "", false
	}
	return s, true
}

// scanString reads the string that starts at d.i. raw is what lies between
// the quotes; plain says it is the string itself (no escapes, valid UTF-8),
// else encoding/json must unquote it.
func (d *fastDecoder) scanString() (raw []byte, plain, ok bool) {
	start := d.i + 1
	plain = true
	ascii := true
	for j := start; j < len(d.data); j++ {
		switch c := d.data[j]; {
		case c == '"':
			raw, d.i = d.data[start:j], j+1
			if plain && !ascii {
				plain = utf8.Valid(raw)
			}
			return raw, plain, true
		case c == '\\':
			plain = false
			j++ // whatever is escaped, it does not end the string
		case c < 0x20:
			return nil, false, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, false, false
}

// number reads a JSON number (RFC 8259 grammar) and returns its text.
func (d *fastDecoder) number() (string, bool) {
	if d.next() == 0 {
		return "", false
	}
	data, j := d.data, d.i
	digits := func() bool {
		k := j
		for j < len(data) && '0' <= data[j] && data[j] <= '9' {
			j++
		}
		return j > k
	}
	if data[j] == '-' {
		j++
	}
	switch {
	case j < len(data) && data[j] == '0':
		j++
	case !digits():
		return "", false
	}
	if j < len(data) && data[j] == '.' {
		j++
		if !digits() {
			return "", false
		}
	}
	if j < len(data) && (data[j] == 'e' || data[j] == 'E') {
		j++
		if j < len(data) && (data[j] == '+' || data[j] == '-') {
			j++
		}
		if !digits() {
			return "", false
		}
	}
	n := string(data[d.i:j])
	d.i = j
	return n, true
}
