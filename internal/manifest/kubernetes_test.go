package manifest

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/kubernetes"
	"github.com/gpufleet/gpufleet/internal/provider/static"
)

func TestParseKubernetesPool(t *testing.T) {
	doc := `apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: prod-k8s}
spec:
  provider: kubernetes
  max: 10
  kubernetes:
    kubeconfig: /etc/gpufleet/kubeconfig
    context: prod
    namespace: ml-jobs
    gpuResource: nvidia.com/gpu
    gpuModelLabel: nvidia.com/gpu.product
    capacityTypeLabel: eks.amazonaws.com/capacityType
    pricePerGPUHour: 2.5
    image: ghcr.io/acme/train:1
    queueName: team-a
    nodeSelector: {workload: gpu}
    clientQPS: 200
    clientBurst: 400
`
	set, fe := Parse([]Source{{Name: "pool.yaml", Data: []byte(doc)}}, Checks{})
	if len(fe) > 0 {
		t.Fatalf("Parse: %v", fe)
	}
	want := &model.KubernetesPoolSettings{
		Kubeconfig: "/etc/gpufleet/kubeconfig", Context: "prod", Namespace: "ml-jobs", GPUResource: "nvidia.com/gpu",
		GPUModelLabel: "nvidia.com/gpu.product", CapacityTypeLabel: "eks.amazonaws.com/capacityType", PricePerGPUHour: 2.5,
		Image: "ghcr.io/acme/train:1", QueueName: "team-a", NodeSelector: map[string]string{"workload": "gpu"}, ClientQPS: 200, ClientBurst: 400,
	}
	if diff := cmp.Diff(want, set.NodePools[0].Spec.Kubernetes); diff != "" {
		t.Errorf("kubernetes settings (-want +got):\n%s", diff)
	}

	_, fe = Parse([]Source{{Name: "pool.yaml", Data: []byte(strings.Replace(doc, "    image:", "    imag:", 1))}}, Checks{})
	if len(fe) == 0 || !strings.Contains(fe.Error(), "spec.kubernetes.imag") {
		t.Errorf("an unknown key: %v", fe)
	}
	_, fe = Parse([]Source{{Name: "pool.yaml", Data: []byte(strings.Replace(doc, "namespace: ml-jobs", "namespace: ML_jobs", 1))}}, driverChecks)
	if len(fe) == 0 || !strings.Contains(fe.Error(), "spec.kubernetes.namespace") {
		t.Errorf("a bad namespace: %v", fe)
	}
}

// driverChecks checks pools as the server's registry does, for the
// drivers these tests declare (the registry itself is wired in
// internal/server).
var driverChecks = Checks{KnownGPU: knownTestGPU, Pool: func(spec *model.NodePoolSpec, prefix string, known func(string) bool) model.FieldErrors {
	switch spec.Provider {
	case static.Name:
		return static.CheckPool(spec, prefix, known)
	case kubernetes.Name:
		return kubernetes.CheckPool(spec, prefix, known)
	}
	return nil
}}
