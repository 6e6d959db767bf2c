package manifest

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Kinds of the fleet's declared documents.
const (
	KindNodePool = "NodePool"
	KindQueue    = "Queue"
	KindProject  = "Project"
	KindBudget   = "Budget"
	// KindPriorityClass declares a priority class (name, value,
	// preemptible) that jobs may name in spec.priority.
	KindPriorityClass = "PriorityClass"
)

// ObjectMeta names a declared fleet object.
type ObjectMeta struct {
	Name string `json:"name"`
}

// NodePool is a manifest of kind NodePool.
type NodePool struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Metadata   ObjectMeta         `json:"metadata"`
	Spec       model.NodePoolSpec `json:"spec"`
}

// Queue is a manifest of kind Queue: the same spec PUT /v1/queues/{name}
// takes.
type Queue struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   ObjectMeta      `json:"metadata"`
	Spec       model.QueueSpec `json:"spec"`
}

// Project is a manifest of kind Project.
type Project struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   ObjectMeta        `json:"metadata"`
	Spec       model.ProjectSpec `json:"spec"`
}

// PriorityClass is a manifest of kind PriorityClass.
type PriorityClass struct {
	APIVersion string                  `json:"apiVersion"`
	Kind       string                  `json:"kind"`
	Metadata   ObjectMeta              `json:"metadata"`
	Spec       model.PriorityClassSpec `json:"spec"`
}

// Validate reports every problem in d.
func (d *PriorityClass) Validate(func(string) bool) model.FieldErrors {
	fe := validateObject(d.APIVersion, d.Kind, KindPriorityClass, d.Metadata)
	return append(fe, d.Spec.Validate("spec")...)
}

// Class is the model's view of d.
func (d *PriorityClass) Class() model.PriorityClass {
	return model.PriorityClass{Name: d.Metadata.Name, Value: d.Spec.Value, Preemptible: d.Spec.Preemptible != nil && *d.Spec.Preemptible}
}

// Validate reports every problem in d (see model.NodePoolSpec.Validate for
// knownGPU).
func (d *NodePool) Validate(knownGPU func(string) bool) model.FieldErrors {
	fe := validateObject(d.APIVersion, d.Kind, KindNodePool, d.Metadata)
	return append(fe, d.Spec.Validate("spec", knownGPU)...)
}

// Validate reports every problem in d.
func (d *Queue) Validate(knownGPU func(string) bool) model.FieldErrors {
	fe := validateObject(d.APIVersion, d.Kind, KindQueue, d.Metadata)
	return append(fe, d.Spec.Validate("spec", knownGPU)...)
}

// Validate reports every problem in d.
func (d *Project) Validate(knownGPU func(string) bool) model.FieldErrors {
	fe := validateObject(d.APIVersion, d.Kind, KindProject, d.Metadata)
	return append(fe, d.Spec.Validate("spec", knownGPU)...)
}

func validateObject(apiVersion, kind, wantKind string, m ObjectMeta) model.FieldErrors {
	var fe model.FieldErrors
	checkHeader(&fe, apiVersion, kind, wantKind)
	switch {
	case m.Name == "":
		fe.Add("metadata.name", "is required")
	case !isDNSLabel(m.Name):
		fe.Add("metadata.name", dnsLabelRule)
	}
	return fe
}

// Set is a declared fleet: every document, each kind sorted by name. Its
// JSON encoding is canonical, so equal sets encode to equal bytes.
type Set struct {
	NodePools []NodePool `json:"nodePools,omitempty"`
	Queues    []Queue    `json:"queues,omitempty"`
	Projects  []Project  `json:"projects,omitempty"`
	Budgets   []Budget   `json:"budgets,omitempty"`
	// PriorityClasses come last in Documents, so the digests of sets
	// recorded before the kind existed do not change.
	PriorityClasses []PriorityClass `json:"priorityClasses,omitempty"`
	// Notifications come after them for the same reason.
	Notifications []Notification `json:"notifications,omitempty"`
}

// Len counts the documents in s.
func (s *Set) Len() int {
	return len(s.NodePools) + len(s.Queues) + len(s.Projects) + len(s.Budgets) + len(s.PriorityClasses) + len(s.Notifications)
}

// sort orders each kind by name.
func (s *Set) sort() {
	slices.SortStableFunc(s.NodePools, func(a, b NodePool) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	slices.SortStableFunc(s.Queues, func(a, b Queue) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	slices.SortStableFunc(s.Projects, func(a, b Project) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	slices.SortStableFunc(s.Budgets, func(a, b Budget) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	slices.SortStableFunc(s.PriorityClasses, func(a, b PriorityClass) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	slices.SortStableFunc(s.Notifications, func(a, b Notification) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
}

// Documents returns s as canonical JSON documents, NodePools, then Queues,
// then Projects, each by name, and their digest (SHA-256 of the documents
// joined by newlines, hex).
func (s *Set) Documents() ([]json.RawMessage, string) {
	var docs []json.RawMessage
	add := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			// Validated documents hold no NaN or infinity; nothing else fails.
			panic(fmt.Sprintf("manifest: encoding a validated document: %v", err))
		}
		docs = append(docs, b)
	}
	for _, d := range s.NodePools {
		add(d)
	}
	for _, d := range s.Queues {
		add(d)
	}
	for _, d := range s.Projects {
		add(d)
	}
	for _, d := range s.Budgets {
		add(d)
	}
	for _, d := range s.PriorityClasses {
		add(d)
	}
	for _, d := range s.Notifications {
		add(d)
	}
	h := sha256.New()
	for _, d := range docs {
		h.Write(d)
		h.Write([]byte("\n"))
	}
	return docs, hex.EncodeToString(h.Sum(nil))
}

// Checks are what validating a fleet's documents needs from outside this
// package. The zero value accepts any GPU model and checks no pool
// against its driver.
type Checks struct {
	// KnownGPU says whether a GPU model exists (the catalog's KnownGPU);
	// nil accepts any name.
	KnownGPU func(string) bool
	// Pool fills in a NodePool's driver defaults and reports the problems
	// its driver sees, with paths under prefix (registry.Registry's
	// CheckPool); nil leaves pools' settings unchecked, as for stored
	// revisions, which were checked when recorded.
	Pool func(spec *model.NodePoolSpec, prefix string, knownGPU func(string) bool) model.FieldErrors
}

// header is what every document starts with; metadata and spec are
// decoded once the kind is known.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   any    `json:"metadata"`
	Spec       any    `json:"spec"`
}

// ParseDocument decodes one fleet document strictly, by its kind, fills
// defaults and validates it. It returns *NodePool, *Queue, *Project,
// *Budget, *PriorityClass or *Notification, or every problem, with paths from the
// document's root.
func ParseDocument(data []byte, format Format, checks Checks) (any, model.FieldErrors) {
	return parseDocument(data, format, checks, false)
}

// parseDocument is ParseDocument; stored accepts what earlier versions
// recorded and this one no longer accepts from users (see inlineWebhook).
func parseDocument(data []byte, format Format, checks Checks, stored bool) (any, model.FieldErrors) {
	var h header
	if fe := decode(data, format, reflect.ValueOf(&h).Elem()); len(fe) > 0 {
		return nil, fe
	}
	var doc interface {
		Validate(func(string) bool) model.FieldErrors
	}
	switch h.Kind {
	case KindNodePool:
		doc = &NodePool{}
	case KindQueue:
		doc = &Queue{}
	case KindProject:
		doc = &Project{}
	case "Job":
		return nil, model.FieldErrors{{Path: "kind", Message: "Job manifests are submitted with `gpufleet run -f`, not declared in the fleet"}}
	case KindBudget:
		doc = &Budget{}
	case KindPriorityClass:
		doc = &PriorityClass{}
	case KindNotification:
		doc = &Notification{}
	default:
		return nil, model.FieldErrors{{Path: "kind", Message: "must be NodePool, Queue, Project, Budget, PriorityClass or Notification" + got(h.Kind)}}
	}
	fe := decode(data, format, reflect.ValueOf(doc).Elem())
	var found model.FieldErrors
	if np, ok := doc.(*NodePool); ok && checks.Pool != nil {
		// The driver's defaults first (a static pool's min and max),
		// then the problems it sees in its settings.
		found = checks.Pool(&np.Spec, "spec", checks.KnownGPU)
	}
	var legacy *WebhookRef
	if b, ok := doc.(*Budget); ok {
		var inline bool
		if legacy, inline, fe = inlineWebhook(h.Spec, fe, stored); inline {
			b.Spec.Webhook = nil // the walk leaves an empty one behind
		}
	}
	for _, e := range append(found, doc.Validate(checks.KnownGPU)...) {
		if !slices.ContainsFunc(fe, func(d model.FieldError) bool { return within(e.Path, d.Path) }) {
			fe = append(fe, e)
		}
	}
	if len(fe) > 0 {
		sortErrs(fe)
		return nil, fe
	}
	if legacy != nil {
		doc.(*Budget).Spec.Webhook = legacy
	}
	return doc, nil
}

// inlineWebhook deals with a budget's webhook written as earlier versions
// wrote it: spec.webhook a URL string (signed with the server's
// --webhook-secret). spec is the document's spec as a generic tree and fe
// the problems decoding it into a Budget reported.
//
// inline reports whether the webhook is such a string. A stored document
// (stored) keeps its URL: the problem the string caused is dropped and
// legacy, the webhook to attach once the rest is valid, is returned,
// so that a data dir written before secret references still loads. A
// user's document gets a problem saying what to write instead, in place of
// the decoder's "want an object"; so does a url or secret key inside the
// webhook object.
func inlineWebhook(spec any, fe model.FieldErrors, stored bool) (legacy *WebhookRef, inline bool, _ model.FieldErrors) {
	m, _ := spec.(map[string]any)
	url, isString := m["webhook"].(string)
	out := fe[:0:0]
	for _, e := range fe {
		switch {
		case isString && e.Path == "spec.webhook":
			if !stored {
				e.Message = InlineWebhookHelp
				out = append(out, e)
			}
		case !stored && e.Path == "spec.webhook.url":
			e.Message = InlineWebhookHelp
			out = append(out, e)
		case !stored && e.Path == "spec.webhook.secret":
			e.Message = inlineKeyHelp
			out = append(out, e)
		default:
			out = append(out, e)
		}
	}
	if stored && isString && url != "" {
		legacy = &WebhookRef{LegacyURL: url}
	}
	return legacy, isString, out
}

func sortErrs(fe model.FieldErrors) {
	slices.SortStableFunc(fe, func(a, b model.FieldError) int { return strings.Compare(a.Path, b.Path) })
}

// Source is one named input: a file's bytes, or an API body's document.
type Source struct {
	// Name prefixes the paths of the source's problems: "fleet/pools.yaml"
	// gives "fleet/pools.yaml[1].spec.min".
	Name string
	Data []byte
	// Format is JSON, YAML or Auto. A YAML source may hold several
	// documents; a JSON source holds one document or an array of them.
	Format Format
}

// maxDocuments bounds one declared fleet.
const maxDocuments = 10000

// Parse decodes and validates every document of every source and builds a
// Set. Problems are reported as NAME[i].path (document i of the source,
// counting from 0); names must be unique per kind across all sources. It
// returns every problem at once and a nil Set if there is any.
func Parse(sources []Source, checks Checks) (*Set, model.FieldErrors) {
	return parse(sources, checks, false)
}

// parse is Parse; stored is parseDocument's.
func parse(sources []Source, checks Checks, stored bool) (*Set, model.FieldErrors) {
	var (
		set   Set
		fe    model.FieldErrors
		where = map[string]string{} // kind/name → where it was first declared
		count int
	)
	for _, src := range sources {
		docs, problems := splitSource(src)
		for _, p := range problems {
			p.Path = src.Name + p.Path
			fe = append(fe, p)
		}
		for i, d := range docs {
			count++
			if count > maxDocuments {
				fe.Add(src.Name, fmt.Sprintf("a fleet holds at most %d documents", maxDocuments))
				return nil, fe
			}
			doc, problems := parseDocument(d.data, d.format, checks, stored)
			for _, p := range InDocument(i, problems) {
				p.Path = src.Name + p.Path
				fe = append(fe, p)
			}
			if doc == nil {
				continue
			}
			var kind, name string
			switch v := doc.(type) {
			case *NodePool:
				kind, name = KindNodePool, v.Metadata.Name
				set.NodePools = append(set.NodePools, *v)
			case *Queue:
				kind, name = KindQueue, v.Metadata.Name
				set.Queues = append(set.Queues, *v)
			case *Project:
				kind, name = KindProject, v.Metadata.Name
				set.Projects = append(set.Projects, *v)
			case *Budget:
				kind, name = KindBudget, v.Metadata.Name
				set.Budgets = append(set.Budgets, *v)
			case *PriorityClass:
				kind, name = KindPriorityClass, v.Metadata.Name
				set.PriorityClasses = append(set.PriorityClasses, *v)
			case *Notification:
				kind, name = KindNotification, v.Metadata.Name
				set.Notifications = append(set.Notifications, *v)
			}
			at := fmt.Sprintf("%s[%d]", src.Name, i)
			if first, dup := where[kind+"/"+name]; dup {
				fe.Add(at+".metadata.name", fmt.Sprintf("%s %q is already declared at %s", kind, name, first))
			} else {
				where[kind+"/"+name] = at
			}
		}
	}
	if len(fe) > 0 {
		sortErrs(fe)
		return nil, fe
	}
	set.sort()
	return &set, nil
}

// rawDoc is one document of a source, ready to decode.
type rawDoc struct {
	data   []byte
	format Format
}

// splitSource splits a source into its documents. Problems with the
// source as a whole have path "" (the caller prefixes the source name).
func splitSource(src Source) ([]rawDoc, model.FieldErrors) {
	format := src.Format
	if format != JSON && format != YAML {
		format = sniff(src.Data)
	}
	if format == YAML {
		parts, err := SplitYAML(src.Data)
		if err != nil {
			return nil, model.FieldErrors{{Path: "", Message: "holds no YAML documents"}}
		}
		docs := make([]rawDoc, len(parts))
		for i, p := range parts {
			docs[i] = rawDoc{data: p, format: YAML}
		}
		return docs, nil
	}
	if t := bytes.TrimLeft(src.Data, " \t\r\n"); len(t) == 0 || t[0] != '[' {
		return []rawDoc{{data: src.Data, format: JSON}}, nil
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(src.Data, &arr); err != nil {
		_, msg := parseJSON(src.Data)
		if msg == "" {
			msg = "not an array of documents"
		}
		return nil, model.FieldErrors{{Path: "", Message: msg}}
	}
	docs := make([]rawDoc, len(arr))
	for i, a := range arr {
		docs[i] = rawDoc{data: a, format: JSON}
	}
	return docs, nil
}

// ParseDocuments reads paths, each a file or a directory whose *.yaml,
// *.yml and *.json files (not recursing, in name order) are read, and
// parses them with Parse, naming each source by its path as given. An
// error is returned for a path that cannot be read; problems with the
// documents come back as FieldErrors.
func ParseDocuments(paths []string, checks Checks) (*Set, model.FieldErrors, error) {
	var sources []Source
	for _, p := range paths {
		files, err := manifestFiles(p)
		if err != nil {
			return nil, nil, err
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, nil, fmt.Errorf("reading manifests: %w", err)
			}
			sources = append(sources, Source{Name: f, Data: data, Format: formatOf(f)})
		}
	}
	set, fe := Parse(sources, checks)
	return set, fe, nil
}

func manifestFiles(p string) ([]string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("reading manifests: %w", err)
	}
	if !fi.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, fmt.Errorf("reading manifests: %w", err)
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && formatOf(e.Name()) != Auto {
			files = append(files, filepath.Join(p, e.Name()))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("reading manifests: %s holds no *.yaml, *.yml or *.json files", p)
	}
	return files, nil
}

func formatOf(name string) Format {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml":
		return YAML
	case ".json":
		return JSON
	}
	return Auto
}

// ParseStored rebuilds a Set from a revision's documents, which were
// validated when recorded; knownGPU is not applied again, so a catalog
// that dropped a model cannot make a stored revision unreadable.
func ParseStored(docs []json.RawMessage) (*Set, error) {
	if len(docs) == 0 {
		return &Set{}, nil
	}
	arr, err := json.Marshal(docs)
	if err != nil {
		return nil, fmt.Errorf("decoding stored fleet documents: %w", err)
	}
	set, fe := parse([]Source{{Name: "documents", Data: arr, Format: JSON}}, Checks{}, true)
	if len(fe) > 0 {
		return nil, fmt.Errorf("decoding stored fleet documents: %w", fe.Err())
	}
	return set, nil
}
