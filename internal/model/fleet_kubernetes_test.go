package model

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestKubernetesPoolValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		k    *KubernetesPoolSettings
		want []string // field paths with problems
	}{
		"no block: every default":  {nil, nil},
		"empty block":              {&KubernetesPoolSettings{}, nil},
		"context only (as before)": {&KubernetesPoolSettings{Context: "prod", Namespace: "ml", PricePerGPUHour: 2.5}, nil},
		"everything": {&KubernetesPoolSettings{
			Kubeconfig: "~/.kube/prod", Context: "prod", Namespace: "gpufleet", GPUResource: "nvidia.com/gpu",
			GPUModelLabel: "nvidia.com/gpu.product", CapacityTypeLabel: "eks.amazonaws.com/capacityType", PricePerGPUHour: 2,
			Image: "ghcr.io/acme/train:1", QueueName: "team-a", NodeSelector: map[string]string{"pool": "gpu", "acme.com/team": ""},
			ClientQPS: 100, ClientBurst: 200, PendingTimeout: Duration(5 * time.Minute), KeepFinished: new(Duration(time.Hour)),
		}, nil},
		"keep no finished Jobs":        {&KubernetesPoolSettings{KeepFinished: new(Duration(0))}, nil},
		"keep finished Jobs < 0":       {&KubernetesPoolSettings{KeepFinished: new(Duration(-time.Second))}, []string{"spec.kubernetes.keepFinished"}},
		"keep finished Jobs long":      {&KubernetesPoolSettings{KeepFinished: new(Duration(366 * 24 * time.Hour))}, []string{"spec.kubernetes.keepFinished"}},
		"in-cluster with a kubeconfig": {&KubernetesPoolSettings{InCluster: true, Context: "x"}, []string{"spec.kubernetes.inCluster"}},
		"bad namespace":                {&KubernetesPoolSettings{Namespace: "GPU_Fleet"}, []string{"spec.kubernetes.namespace"}},
		"bad names": {&KubernetesPoolSettings{GPUResource: "nvidia.com/", GPUModelLabel: "a b", CapacityTypeLabel: "UPPER.com/x"},
			[]string{"spec.kubernetes.capacityTypeLabel", "spec.kubernetes.gpuModelLabel", "spec.kubernetes.gpuResource"}},
		"negative numbers": {&KubernetesPoolSettings{PricePerGPUHour: -1, ClientQPS: -1, ClientBurst: -1, PendingTimeout: -1},
			[]string{"spec.kubernetes.clientBurst", "spec.kubernetes.clientQPS", "spec.kubernetes.pendingTimeout", "spec.kubernetes.pricePerGPUHour"}},
		"image with spaces": {&KubernetesPoolSettings{Image: "my image"}, []string{"spec.kubernetes.image"}},
		"bad queue name":    {&KubernetesPoolSettings{QueueName: "team/a"}, []string{"spec.kubernetes.queueName"}},
		"bad node selector": {&KubernetesPoolSettings{NodeSelector: map[string]string{"-x": "ok", "y": "not ok!"}}, []string{`spec.kubernetes.nodeSelector["-x"]`, `spec.kubernetes.nodeSelector["y"]`}},
	} {
		t.Run(name, func(t *testing.T) {
			spec := NodePoolSpec{Provider: ProviderKubernetes, Kubernetes: tc.k, Max: 1}
			var got []string
			for _, fe := range spec.Validate("spec", nil) {
				got = append(got, fe.Path)
			}
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
	spec := NodePoolSpec{Provider: ProviderSim, Kubernetes: &KubernetesPoolSettings{}}
	if fe := spec.Validate("spec", nil); len(fe) != 1 || fe[0].Path != "spec.kubernetes" {
		t.Errorf("a kubernetes block on a sim pool: %v", fe)
	}
}
