package manifest

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpufleet/gpufleet/internal/model"
)

// APIVersion is the apiVersion every gpufleet manifest declares.
const APIVersion = "gpufleet.dev/v1"

// Limits on metadata.
const (
	maxNameLen     = 63
	maxTags        = 50
	maxTagKeyLen   = 63
	maxTagValueLen = 255 // in characters
)

// Metadata names a manifest's object and labels it for accounting.
type Metadata struct {
	// Name is a DNS label; empty lets the server choose.
	Name string `json:"name,omitempty"`
	// Project is a DNS label; empty means the caller's default project.
	Project string `json:"project,omitempty"`
	// Tags label the object for cost reports and budget selectors such as
	// team=nlp.
	Tags map[string]string `json:"tags,omitempty"`
}

// Validate reports every problem in m, with paths under prefix (usually
// "metadata").
func (m *Metadata) Validate(prefix string) model.FieldErrors {
	var fe model.FieldErrors
	if m.Name != "" && !isDNSLabel(m.Name) {
		fe.Add(prefix+".name", dnsLabelRule)
	}
	if m.Project != "" && !isDNSLabel(m.Project) {
		fe.Add(prefix+".project", dnsLabelRule)
	}
	if len(m.Tags) > maxTags {
		fe.Add(prefix+".tags", fmt.Sprintf("has %d tags; at most %d are allowed", len(m.Tags), maxTags))
	}
	for k, v := range m.Tags {
		keyOK, valueOK := isTagKey(k), isTagValue(v)
		if keyOK && valueOK {
			continue // the common case builds no path
		}
		p := keyPath(prefix+".tags", k)
		if !keyOK {
			fe.Add(p, fmt.Sprintf("tag key must be 1 to %d letters, digits, '.', '_', '-' or '/', starting with a letter or digit", maxTagKeyLen))
		}
		if !valueOK {
			fe.Add(p, fmt.Sprintf("tag value must be at most %d printable characters", maxTagValueLen))
		}
	}
	return fe
}

const dnsLabelRule = "must be at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit"

func isDNSLabel(s string) bool {
	if s == "" || len(s) > maxNameLen || !isLowerAlnum(s[0]) || !isLowerAlnum(s[len(s)-1]) {
		return false
	}
	for i := range len(s) {
		if !isLowerAlnum(s[i]) && s[i] != '-' {
			return false
		}
	}
	return true
}

func isLowerAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

// isTagKey keeps keys usable in selectors ("team=nlp,env=prod") and as
// cloud provider tag keys.
func isTagKey(k string) bool {
	if k == "" || len(k) > maxTagKeyLen {
		return false
	}
	for i := range len(k) {
		c := k[i]
		alnum := isLowerAlnum(c) || 'A' <= c && c <= 'Z'
		if !alnum && (i == 0 || !strings.ContainsRune("._-/", rune(c))) {
			return false
		}
	}
	return true
}

func isTagValue(v string) bool {
	if !utf8.ValidString(v) || utf8.RuneCountInString(v) > maxTagValueLen {
		return false
	}
	for _, r := range v {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// Job is a job manifest: what `gpufleet run -f` reads and POST /v1/jobs
// takes.
type Job struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Metadata   Metadata      `json:"metadata"`
	Spec       model.JobSpec `json:"spec"`
}

// ParseJob decodes a job manifest strictly, fills the spec's defaults and
// validates it. knownGPU says whether a GPU model name exists in the
// catalog; nil accepts any name. It returns every problem at once (syntax,
// unknown fields, wrong types and invalid values) and a nil Job if there is
// any.
func ParseJob(data []byte, format Format, knownGPU func(string) bool) (*Job, model.FieldErrors) {
	var j Job
	fe := decode(data, format, reflect.ValueOf(&j).Elem())
	if slices.ContainsFunc(fe, func(e model.FieldError) bool { return e.Path == bodyPath }) {
		return nil, fe
	}
	j.Spec.Default()
	// A field that failed to decode was left zero; what Validate says about
	// that zero would only repeat the problem.
	for _, e := range j.Validate(knownGPU) {
		if !slices.ContainsFunc(fe, func(d model.FieldError) bool { return within(e.Path, d.Path) }) {
			fe = append(fe, e)
		}
	}
	if len(fe) > 0 {
		slices.SortStableFunc(fe, func(a, b model.FieldError) int { return strings.Compare(a.Path, b.Path) })
		return nil, fe
	}
	return &j, nil
}

// within reports whether path is at or below base.
func within(path, base string) bool {
	rest, ok := strings.CutPrefix(path, base)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '[')
}

// Validate reports every problem in j: its apiVersion and kind, metadata,
// and spec (see model.JobSpec.Validate for knownGPU). It does not fill
// defaults.
func (j *Job) Validate(knownGPU func(string) bool) model.FieldErrors {
	var fe model.FieldErrors
	checkHeader(&fe, j.APIVersion, j.Kind, "Job")
	fe = append(fe, j.Metadata.Validate("metadata")...)
	fe = append(fe, j.Spec.Validate("spec", knownGPU)...)
	return fe
}

// checkHeader checks the apiVersion and kind every manifest starts with.
func checkHeader(fe *model.FieldErrors, apiVersion, kind, wantKind string) {
	if apiVersion != APIVersion {
		fe.Add("apiVersion", "must be "+APIVersion+got(apiVersion))
	}
	if kind != wantKind {
		fe.Add("kind", "must be "+wantKind+got(kind))
	}
}

func got(s string) string {
	if s == "" {
		return ""
	}
	return ", got " + strconv.Quote(s)
}
