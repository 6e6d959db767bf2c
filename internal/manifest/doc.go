// Package manifest decodes manifests and API bodies strictly and checks the
// documents it knows (kind Job; the fleet kinds NodePool, Queue and Project,
// parsed as a set from files and directories by Parse and ParseDocuments;
// Budget later).
//
// It owns the rules that turn bytes into gpufleet's types: JSON and YAML
// syntax, unknown fields, type mismatches, the apiVersion and kind header and
// metadata. What a spec means is the model package's business: ParseJob
// decodes, applies model.JobSpec.Default and reports model.JobSpec.Validate's
// problems alongside its own.
//
// Invariants:
//   - Every problem in a document is reported in one call, as a
//     model.FieldError whose Path names the field as the user wrote it
//     ("spec.resources.gpus", "spec.run.command[0]", `spec.run.env["a.b"]`),
//     sorted by path. Problems with the document as a whole (not JSON or YAML,
//     empty, several documents where one is wanted) have Path "body".
//   - A decode that reports problems leaves its target untouched.
//   - No input makes the package panic.
//   - JSON null means the zero value, for every Go type.
//   - Field names match their json tags exactly; encoding/json's
//     case-insensitive matching is not applied. JSON objects with duplicate
//     keys keep the last value (YAML duplicates are rejected).
//
// Decoding takes two paths to one result: a valid document is decoded in
// one pass straight into the Go value (fast.go); anything the fast path is
// not sure of is decoded again through a generic tree (walk.go), which
// reports every problem with its path. FuzzFastDecode holds the fast path
// to the walk's result.
//
// The decoder serves any Go type built from structs, pointers, slices, maps
// with string keys, strings, booleans, numbers, []byte (base64), interface{}
// (numbers as float64, as encoding/json does) and types that implement
// json.Unmarshaler or encoding.TextUnmarshaler. A field of any other Go type
// is reported as a problem at its path; the ",string" tag option is ignored.
package manifest
