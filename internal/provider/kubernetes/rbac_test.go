package kubernetes

import (
	"bytes"
	"os"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// TestRBACManifest checks that deploy/kubernetes/rbac.yaml grants what the
// driver does: its informers list and watch, its workers create and
// delete, its log shippers read pod logs.
func TestRBACManifest(t *testing.T) {
	data, err := os.ReadFile("../../../deploy/kubernetes/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules []rbacv1.PolicyRule
	var roleNS string
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var kind struct{ Kind string }
		if err := yaml.Unmarshal(doc, &kind); err != nil {
			t.Fatalf("parsing: %v", err)
		}
		switch kind.Kind {
		case "Role":
			var r rbacv1.Role
			if err := yaml.UnmarshalStrict(doc, &r); err != nil {
				t.Fatal(err)
			}
			rules, roleNS = append(rules, r.Rules...), r.Namespace
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := yaml.UnmarshalStrict(doc, &r); err != nil {
				t.Fatal(err)
			}
			for _, rule := range r.Rules {
				if !slices.Equal(rule.Resources, []string{"nodes"}) || slices.ContainsFunc(rule.Verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" }) {
					t.Errorf("the ClusterRole grants more than reading nodes: %+v", rule)
				}
			}
			rules = append(rules, r.Rules...)
		}
	}
	if roleNS != DefaultNamespace {
		t.Errorf("Role namespace = %q, want %q", roleNS, DefaultNamespace)
	}
	allowed := func(group, resource, verb string) bool {
		for _, r := range rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
				return true
			}
		}
		return false
	}
	for _, need := range []struct{ group, resource, verbs string }{
		{"batch", "jobs", "get list watch create delete"},
		{"", "services", "get list watch create delete"},
		{"", "secrets", "get list create delete"},
		{"networking.k8s.io", "networkpolicies", "get list create delete"},
		{"", "pods", "get list watch"},
		{"", "pods/log", "get"},
		{"", "nodes", "get list watch"},
	} {
		for _, verb := range bytes.Fields([]byte(need.verbs)) {
			if !allowed(need.group, need.resource, string(verb)) {
				t.Errorf("rbac.yaml does not allow %s on %s", verb, need.resource)
			}
		}
	}
}
