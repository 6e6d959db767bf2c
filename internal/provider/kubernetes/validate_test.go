package kubernetes

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestKubernetesPoolValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		k    *model.KubernetesPoolSettings
		want []string // field paths with problems
	}{
		"no block: every default":  {nil, nil},
		"empty block":              {&model.KubernetesPoolSettings{}, nil},
		"context only (as before)": {&model.KubernetesPoolSettings{Context: "prod", Namespace: "ml", PricePerGPUHour: 2.5}, nil},
		"everything": {&model.KubernetesPoolSettings{
			Kubeconfig: "~/.kube/prod", Context: "prod", Namespace: "gpufleet", GPUResource: "nvidia.com/gpu",
			GPUModelLabel: "nvidia.com/gpu.product", CapacityTypeLabel: "eks.amazonaws.com/capacityType", PricePerGPUHour: 2,
			Image: "ghcr.io/acme/train:1", QueueName: "team-a", NodeSelector: map[string]string{"pool": "gpu", "acme.com/team": ""},
			ClientQPS: 100, ClientBurst: 200, PendingTimeout: model.Duration(5 * time.Minute), KeepFinished: new(model.Duration(time.Hour)),
		}, nil},
		"keep no finished Jobs":        {&model.KubernetesPoolSettings{KeepFinished: new(model.Duration(0))}, nil},
		"keep finished Jobs < 0":       {&model.KubernetesPoolSettings{KeepFinished: new(model.Duration(-time.Second))}, []string{"spec.kubernetes.keepFinished"}},
		"keep finished Jobs long":      {&model.KubernetesPoolSettings{KeepFinished: new(model.Duration(366 * 24 * time.Hour))}, []string{"spec.kubernetes.keepFinished"}},
		"in-cluster with a kubeconfig": {&model.KubernetesPoolSettings{InCluster: true, Context: "x"}, []string{"spec.kubernetes.inCluster"}},
		"bad namespace":                {&model.KubernetesPoolSettings{Namespace: "GPU_Fleet"}, []string{"spec.kubernetes.namespace"}},
		"bad names": {&model.KubernetesPoolSettings{GPUResource: "nvidia.com/", GPUModelLabel: "a b", CapacityTypeLabel: "UPPER.com/x"},
			[]string{"spec.kubernetes.capacityTypeLabel", "spec.kubernetes.gpuModelLabel", "spec.kubernetes.gpuResource"}},
		"negative numbers": {&model.KubernetesPoolSettings{PricePerGPUHour: -1, ClientQPS: -1, ClientBurst: -1, PendingTimeout: -1},
			[]string{"spec.kubernetes.clientBurst", "spec.kubernetes.clientQPS", "spec.kubernetes.pendingTimeout", "spec.kubernetes.pricePerGPUHour"}},
		"gate port 0 to 65535": {&model.KubernetesPoolSettings{GatePort: 8443, NetworkPolicy: new(false)}, nil},
		"gate port past 65535": {&model.KubernetesPoolSettings{GatePort: 65536}, []string{"spec.kubernetes.gatePort"}},
		"negative gate port":   {&model.KubernetesPoolSettings{GatePort: -1}, []string{"spec.kubernetes.gatePort"}},
		"image with spaces":    {&model.KubernetesPoolSettings{Image: "my image"}, []string{"spec.kubernetes.image"}},
		"bad queue name":       {&model.KubernetesPoolSettings{QueueName: "team/a"}, []string{"spec.kubernetes.queueName"}},
		"bad node selector":    {&model.KubernetesPoolSettings{NodeSelector: map[string]string{"-x": "ok", "y": "not ok!"}}, []string{`spec.kubernetes.nodeSelector["-x"]`, `spec.kubernetes.nodeSelector["y"]`}},
	} {
		t.Run(name, func(t *testing.T) {
			spec := model.NodePoolSpec{Provider: model.ProviderKubernetes, Kubernetes: tc.k, Max: 1}
			var got []string
			for _, fe := range CheckPool(&spec, "spec", nil) {
				got = append(got, fe.Path)
			}
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}
