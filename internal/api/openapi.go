package api

import (
	"encoding/json"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// OpenAPI renders the OpenAPI 3.0 document of Routes, with JSON schemas
// derived from the Go types of the declared bodies.
func OpenAPI(version string) ([]byte, error) {
	if d, ok := openAPIDocs.Load(version); ok {
		return d.([]byte), nil
	}
	d, err := buildOpenAPI(version)
	if err == nil {
		openAPIDocs.Store(version, d)
	}
	return d, err
}

// openAPIDocs holds each version's document, built once per process: a
// replica builds it as a follower, and its takeover (New again) reuses it
// rather than reflecting over every route's types again between the lease
// and serving. Callers must not modify the bytes.
var openAPIDocs sync.Map

func buildOpenAPI(version string) ([]byte, error) {
	g := &schemaGen{defs: map[string]any{}}
	paths := map[string]map[string]any{}
	for _, rt := range Routes() {
		op := map[string]any{
			"summary":     rt.Summary,
			"operationId": operationID(rt),
		}
		var params []any
		for _, name := range pathParams(rt.Pattern) {
			params = append(params, map[string]any{"name": name, "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, p := range rt.Query {
			params = append(params, map[string]any{"name": p.Name, "in": "query", "description": p.Description, "schema": map[string]any{"type": p.Type}})
		}
		if rt.Method == "POST" && rt.Pattern == "/v1/jobs" {
			params = append(params, map[string]any{"name": IdempotencyHeader, "in": "header", "description": "makes a retried submission return the first one's job", "schema": map[string]any{"type": "string", "maxLength": 255}})
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		if rt.Request != nil {
			schema := g.ref(reflect.TypeOf(rt.Request))
			content := map[string]any{"application/json": map[string]any{"schema": schema}}
			if rt.Pattern == "/v1/jobs" {
				content["application/yaml"] = map[string]any{"schema": schema}
			}
			op["requestBody"] = map[string]any{"required": true, "content": content}
		}
		ok := map[string]any{"description": "success"}
		switch {
		case rt.Response != nil:
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": g.ref(reflect.TypeOf(rt.Response))}}
		case rt.ResponseType != "":
			ok["content"] = map[string]any{rt.ResponseType: map[string]any{"schema": map[string]any{"type": "string"}}}
		}
		problem := map[string]any{"description": "error", "content": map[string]any{ProblemContentType: map[string]any{"schema": g.ref(reflect.TypeOf(Problem{}))}}}
		responses := map[string]any{itoa(rt.Status): ok, "default": problem}
		if !rt.Public {
			responses["401"] = problem
			op["security"] = []any{map[string]any{"bearer": []any{}}}
		} else {
			op["security"] = []any{}
		}
		op["responses"] = responses
		op["x-gpufleet-permission"] = string(rt.Perm)
		if paths[rt.Pattern] == nil {
			paths[rt.Pattern] = map[string]any{}
		}
		paths[rt.Pattern][strings.ToLower(rt.Method)] = op
	}
	doc := map[string]any{
		"openapi": "3.0.3",
		"info":    map[string]any{"title": "gpufleet API", "version": version},
		"paths":   paths,
		"components": map[string]any{
			"schemas":         g.defs,
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
		},
	}
	return json.MarshalIndent(doc, "", "  ")
}

var pathParam = regexp.MustCompile(`\{([a-zA-Z]+)\}`)

func pathParams(p string) []string {
	var out []string
	for _, m := range pathParam.FindAllStringSubmatch(p, -1) {
		out = append(out, m[1])
	}
	return out
}

func operationID(rt Route) string {
	parts := []string{strings.ToLower(rt.Method)}
	for _, seg := range strings.Split(strings.Trim(rt.Pattern, "/"), "/") {
		seg = strings.Trim(seg, "{}")
		seg = strings.ReplaceAll(seg, ".", "_")
		if seg == "" || seg == "v1" {
			continue
		}
		parts = append(parts, strings.ToUpper(seg[:1])+seg[1:])
	}
	return strings.Join(parts, "")
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// schemaGen turns Go types into JSON schemas, naming structs as components.
type schemaGen struct{ defs map[string]any }

var (
	timeType     = reflect.TypeOf(time.Time{})
	bytesType    = reflect.TypeOf(model.Bytes(0))
	durationType = reflect.TypeOf(model.Duration(0))
	rawType      = reflect.TypeOf(json.RawMessage(nil))
)

func (g *schemaGen) ref(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case bytesType:
		return map[string]any{"type": "string", "description": "a quantity such as 40Gi", "example": "40Gi"}
	case durationType:
		return map[string]any{"type": "string", "description": "a duration such as 30m, 12h or 7d", "example": "30m"}
	case rawType:
		return map[string]any{"description": "any JSON value"}
	}
	switch t.Kind() {
	case reflect.Struct:
		name := t.Name()
		if name == "" {
			return g.object(t)
		}
		if _, ok := g.defs[name]; !ok {
			g.defs[name] = map[string]any{} // break recursion
			g.defs[name] = g.object(t)
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "format": "byte"}
		}
		return map[string]any{"type": "array", "items": g.ref(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.ref(t.Elem())}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	}
	return map[string]any{}
}

func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	g.fields(t, props, &required)
	out := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		sort.Strings(required)
		out["required"] = required
	}
	return out
}

func (g *schemaGen) fields(t reflect.Type, props map[string]any, required *[]string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				g.fields(ft, props, required)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		props[name] = g.ref(f.Type)
		if !strings.Contains(opts, "omitempty") && f.Type.Kind() != reflect.Pointer {
			*required = append(*required, name)
		}
	}
}
