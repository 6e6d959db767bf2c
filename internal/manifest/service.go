package manifest

import (
	"reflect"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// KindService declares an inference endpoint (model.ServiceSpec).
const KindService = "Service"

// Service is a manifest of kind Service: what POST /v1/services and
// `gpufleet services apply` take.
type Service struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   Metadata          `json:"metadata"`
	Spec       model.ServiceSpec `json:"spec"`
}

// ParseService decodes a service manifest strictly, fills the spec's
// defaults and validates it, as ParseJob does for jobs. A service must be
// named.
func ParseService(data []byte, format Format, knownGPU func(string) bool) (*Service, model.FieldErrors) {
	var s Service
	fe := decode(data, format, reflect.ValueOf(&s).Elem())
	if slices.ContainsFunc(fe, func(e model.FieldError) bool { return e.Path == bodyPath }) {
		return nil, fe
	}
	s.Spec.Default()
	for _, e := range s.Validate(knownGPU) {
		if !slices.ContainsFunc(fe, func(d model.FieldError) bool { return within(e.Path, d.Path) }) {
			fe = append(fe, e)
		}
	}
	if len(fe) > 0 {
		slices.SortStableFunc(fe, func(a, b model.FieldError) int { return strings.Compare(a.Path, b.Path) })
		return nil, fe
	}
	return &s, nil
}

// Validate reports every problem in s; it does not fill defaults.
func (s *Service) Validate(knownGPU func(string) bool) model.FieldErrors {
	var fe model.FieldErrors
	checkHeader(&fe, s.APIVersion, s.Kind, KindService)
	if s.Metadata.Name == "" {
		fe.Add("metadata.name", "must be set: the service is reached at /services/NAME/")
	}
	fe = append(fe, s.Metadata.Validate("metadata")...)
	fe = append(fe, s.Spec.Validate("spec", knownGPU)...)
	return fe
}
