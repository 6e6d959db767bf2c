package model

import "testing"

// TestSettingsBlockOfAnotherProvider: only the provider's own block may be
// set; what is in it is its driver's to check.
func TestSettingsBlockOfAnotherProvider(t *testing.T) {
	spec := NodePoolSpec{Provider: ProviderStatic, Max: 1, SSH: &SSHPoolSettings{}, Static: &StaticPoolSettings{Machines: []StaticMachine{{Name: "a", Address: "h", GPUs: "1xH100"}}}}
	if fe := spec.Validate("spec", nil); len(fe) != 1 || fe[0].Path != "spec.ssh" {
		t.Errorf("an ssh block on a static pool: %v", fe)
	}
	spec = NodePoolSpec{Provider: ProviderSim, Max: 1, AWS: &AWSPoolSettings{}, Kubernetes: &KubernetesPoolSettings{}}
	if fe := spec.Validate("spec", nil); len(fe) != 2 || fe[0].Path != "spec.aws" || fe[1].Path != "spec.kubernetes" {
		t.Errorf("aws and kubernetes blocks on a sim pool: %v", fe)
	}
	spec = NodePoolSpec{Max: 1}
	if fe := spec.Validate("spec", nil); len(fe) != 1 || fe[0].Path != "spec.provider" {
		t.Errorf("no provider: %v", fe)
	}
}
