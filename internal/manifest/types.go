package manifest

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// typeInfo is what the decoder needs to know about a Go type, computed once.
type typeInfo struct {
	unmarshaler     bool // *T implements json.Unmarshaler
	textUnmarshaler bool // *T implements encoding.TextUnmarshaler (and not json.Unmarshaler)
	// For structs: fields by JSON name, and the names in declaration order
	// for suggestions.
	fields map[string]field
	names  []string
}

// field is a struct field reachable by a JSON name.
type field struct {
	index  []int // as for reflect.Value.FieldByIndex
	tagged bool  // named by its json tag rather than its Go name
	pos    int   // the name's place in typeInfo.names
}

// typeInfos caches typeInfo by reflect.Type. Entries are immutable once
// stored, and a type's entry never changes, so the cache is invisible to
// callers except in speed.
var typeInfos sync.Map

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// infoOf returns t's typeInfo, computing it on first use.
func infoOf(t reflect.Type) *typeInfo {
	if ti, ok := typeInfos.Load(t); ok {
		return ti.(*typeInfo)
	}
	pt := reflect.PointerTo(t)
	ti := &typeInfo{unmarshaler: t.Kind() != reflect.Pointer && pt.Implements(unmarshalerType)}
	ti.textUnmarshaler = !ti.unmarshaler && t.Kind() != reflect.Pointer && pt.Implements(textUnmarshalerType)
	if t.Kind() == reflect.Struct {
		ti.fields, ti.names = structFields(t)
	}
	actual, _ := typeInfos.LoadOrStore(t, ti)
	return actual.(*typeInfo)
}

// structFields lists the fields encoding/json would decode into, by JSON
// name, following its rules: `json:"-"` and unexported fields are skipped;
// the fields of an embedded struct without a tag name are promoted; a
// shallower field hides deeper ones of the same name; at equal depth the one
// named by a tag wins, and if that does not settle it, none does.
func structFields(t reflect.Type) (map[string]field, []string) {
	type embedded struct {
		t     reflect.Type
		index []int
	}
	fields := map[string]field{}
	var names []string
	seen := map[string]bool{} // names settled at a shallower depth
	visited := map[reflect.Type]bool{}
	for level := []embedded{{t: t}}; len(level) > 0; {
		var next []embedded
		candidates := map[string][]field{}
		var order []string
		for _, e := range level {
			if visited[e.t] {
				continue
			}
			visited[e.t] = true
			for i := range e.t.NumField() {
				sf := e.t.Field(i)
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, _, _ := strings.Cut(tag, ",")
				index := append(append([]int(nil), e.index...), i)
				ft := sf.Type
				if sf.Anonymous && name == "" {
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
						if !sf.IsExported() {
							continue // encoding/json cannot allocate it either
						}
					}
					if ft.Kind() == reflect.Struct {
						next = append(next, embedded{ft, index})
						continue
					}
				}
				if !sf.IsExported() {
					continue
				}
				tagged := name != ""
				if !tagged {
					name = sf.Name
				}
				if seen[name] {
					continue
				}
				if _, ok := candidates[name]; !ok {
					order = append(order, name)
				}
				candidates[name] = append(candidates[name], field{index: index, tagged: tagged})
			}
		}
		for _, name := range order {
			seen[name] = true
			if f, ok := dominant(candidates[name]); ok {
				f.pos = len(names)
				fields[name] = f
				names = append(names, name)
			}
		}
		level = next
	}
	return fields, names
}

// dominant picks the field that a name means among fields at one depth.
func dominant(fs []field) (field, bool) {
	if len(fs) == 1 {
		return fs[0], true
	}
	var win []field
	for _, f := range fs {
		if f.tagged {
			win = append(win, f)
		}
	}
	if len(win) == 1 {
		return win[0], true
	}
	return field{}, false
}

// suggest returns ` (did you mean "x"?)` for the field name closest to key,
// ignoring case, or "" if none is close: within one edit for keys of 3 to 5
// bytes, two for longer keys.
func (ti *typeInfo) suggest(key string) string {
	limit := min(2, len(key)/3)
	lower := strings.ToLower(key)
	best, bestDist, bestSkew := "", limit+1, 0
	for _, name := range ti.names {
		skew := abs(len(name) - len(key))
		if skew > limit {
			continue // the distance is at least the skew; skipping keeps long keys cheap
		}
		dist := editDistance(lower, strings.ToLower(name))
		if dist < bestDist || dist == bestDist && skew < bestSkew {
			best, bestDist, bestSkew = name, dist, skew
		}
	}
	if best == "" {
		return ""
	}
	return " (did you mean " + strconv.Quote(best) + "?)"
}

// editDistance counts the byte insertions, deletions, substitutions and
// transpositions of neighbours that turn a into b (optimal string alignment).
func editDistance(a, b string) int {
	rows := [3][]int{make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)}
	for j := range rows[1] {
		rows[1][j] = j
	}
	for i := 1; i <= len(a); i++ {
		prev2, prev, cur := rows[0], rows[1], rows[2]
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		rows = [3][]int{prev, cur, prev2}
	}
	return rows[1][len(b)]
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
