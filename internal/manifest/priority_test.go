package manifest

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

// TestParsePriorityClass: admins declare priority classes in the fleet
// (issue #14 item 5); preemptible is required, the value bounded.
func TestParsePriorityClass(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		doc     string
		want    []model.PriorityClass
		wantErr model.FieldErrors
	}{
		"non-preemptible batch": {
			doc:  "apiVersion: gpufleet.dev/v1\nkind: PriorityClass\nmetadata: {name: protected}\nspec: {value: 50, preemptible: false}\n",
			want: []model.PriorityClass{{Name: "protected", Value: 50, Preemptible: false}},
		},
		"preemptible is required": {
			doc:     "apiVersion: gpufleet.dev/v1\nkind: PriorityClass\nmetadata: {name: p}\nspec: {value: 2000000000}\n",
			wantErr: model.FieldErrors{{Path: "c.yaml[0].spec.preemptible", Message: "is required: true (work of this class may be preempted) or false"}, {Path: "c.yaml[0].spec.value", Message: "must be between -1000000000 and 1000000000"}},
		},
		"unknown field": {
			doc:     "apiVersion: gpufleet.dev/v1\nkind: PriorityClass\nmetadata: {name: p}\nspec: {value: 1, preemptible: true, preempts: false}\n",
			wantErr: model.FieldErrors{{Path: "c.yaml[0].spec.preempts", Message: "unknown field"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			set, fe := Parse([]Source{{Name: "c.yaml", Data: []byte(tc.doc), Format: YAML}}, Checks{})
			if diff := cmp.Diff(tc.wantErr, fe); diff != "" {
				t.Fatalf("problems (-want +got):\n%s", diff)
			}
			if set == nil {
				return
			}
			var got []model.PriorityClass
			for i := range set.PriorityClasses {
				got = append(got, set.PriorityClasses[i].Class())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("classes (-want +got):\n%s", diff)
			}
		})
	}
}
