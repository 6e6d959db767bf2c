package kubernetes

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Defaults of model.KubernetesPoolSettings.
const (
	DefaultNamespace         = "gpufleet"
	DefaultGPUResource       = "nvidia.com/gpu"
	DefaultGPUModelLabel     = "nvidia.com/gpu.product"
	DefaultCapacityTypeLabel = "karpenter.sh/capacity-type"
	DefaultQPS               = 500
	DefaultBurst             = 1000
	DefaultPendingTimeout    = 10 * time.Minute
	DefaultKeepFinished      = 10 * time.Minute
)

// Labels and annotations the driver reads from nodes.
const (
	LabelRegion       = "topology.kubernetes.io/region"
	LabelZone         = "topology.kubernetes.io/zone"
	LabelInstanceType = "node.kubernetes.io/instance-type"
	// LabelGPUMemory is GPU feature discovery's per-GPU memory in MiB,
	// used for models the catalog does not know.
	LabelGPUMemory = "nvidia.com/gpu.memory"
)

// Labels and annotations the driver sets on its objects.
const (
	// LabelManagedBy marks every object the driver creates; its value is
	// the pool name.
	LabelManagedBy = "gpufleet.dev/managed-by"
	LabelJobID     = "gpufleet.dev/job-id"
	LabelAttempt   = "gpufleet.dev/attempt"
	LabelProject   = "gpufleet.dev/project"
	// LabelNode is the virtual node whose replicas the object runs.
	LabelNode = "gpufleet.dev/node"
	// LabelPool is set on virtual nodes registered with the control plane.
	LabelPool = "gpufleet.dev/pool"
	// LabelKueueQueue submits a Job to a Kueue LocalQueue.
	LabelKueueQueue = "kueue.x-k8s.io/queue-name"
	// AnnotationTagPrefix prefixes a job tag's key in pod annotations:
	// tag team=nlp becomes tags.gpufleet.dev/team: nlp.
	AnnotationTagPrefix = "tags.gpufleet.dev/"
	// AnnotationAttemptID and AnnotationRankBase say exactly which
	// replicas a Job runs: ranks RankBase to RankBase+completions-1 of
	// the attempt (labels may hold a shortened attempt id).
	AnnotationAttemptID = "gpufleet.dev/attempt-id"
	AnnotationRankBase  = "gpufleet.dev/rank-base"
	// AnnotationEndpoint, on the Job of a service's replica, is where the
	// server's proxy reaches it: the attempt's Service, NAME.NAMESPACE.svc:PORT.
	AnnotationEndpoint = "gpufleet.dev/endpoint"
	// AnnotationCompletionIndex is set by the Job controller on each pod
	// of an indexed Job.
	AnnotationCompletionIndex = "batch.kubernetes.io/job-completion-index"
)

// ContainerName is the name of the one container of a replica's pod.
const ContainerName = "main"

// withDefaults fills the zero fields of s.
func withDefaults(s model.KubernetesPoolSettings) model.KubernetesPoolSettings {
	if s.Namespace == "" {
		s.Namespace = DefaultNamespace
	}
	if s.GPUResource == "" {
		s.GPUResource = DefaultGPUResource
	}
	if s.GPUModelLabel == "" {
		s.GPUModelLabel = DefaultGPUModelLabel
	}
	if s.CapacityTypeLabel == "" {
		s.CapacityTypeLabel = DefaultCapacityTypeLabel
	}
	if s.ClientQPS == 0 {
		s.ClientQPS = DefaultQPS
	}
	if s.ClientBurst == 0 {
		s.ClientBurst = DefaultBurst
	}
	if s.PendingTimeout == 0 {
		s.PendingTimeout = model.Duration(DefaultPendingTimeout)
	}
	if s.KeepFinished == nil {
		s.KeepFinished = new(model.Duration(DefaultKeepFinished))
	} else {
		s.KeepFinished = new(*s.KeepFinished)
	}
	s.NodeSelector = maps.Clone(s.NodeSelector)
	return s
}

// NewClient builds a clientset for the cluster s names: the in-cluster
// service account when s.InCluster, else s.Context of the kubeconfig at
// s.Kubeconfig ($KUBECONFIG, then ~/.kube/config, when empty). Requests are
// limited to s.ClientQPS with bursts of s.ClientBurst (defaults 500 and
// 1000). It reads files but does not contact the cluster.
func NewClient(s model.KubernetesPoolSettings) (kubernetes.Interface, error) {
	if fe := ValidateSettings(&s, "kubernetes"); len(fe) > 0 {
		return nil, fmt.Errorf("configuring kubernetes client: %w", fe.Err())
	}
	s = withDefaults(s)
	cfg, err := restConfig(s)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = float32(s.ClientQPS), s.ClientBurst
	cfg.UserAgent = "gpufleet"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating kubernetes client: %w", err)
	}
	return cs, nil
}

func restConfig(s model.KubernetesPoolSettings) (*rest.Config, error) {
	if s.InCluster {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("reading in-cluster kubernetes config: %w", err)
		}
		return cfg, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if s.Kubeconfig != "" {
		rules.ExplicitPath = expandHome(s.Kubeconfig)
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: s.Context}).ClientConfig()
	if err != nil {
		what := "the current context"
		if s.Context != "" {
			what = "context " + s.Context
		}
		return nil, fmt.Errorf("reading kubeconfig (%s): %w", what, err)
	}
	return cfg, nil
}

// expandHome expands a leading ~/ to the user's home directory.
func expandHome(p string) string {
	rest, ok := strings.CutPrefix(p, "~/")
	if !ok {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return p
	}
	return filepath.Join(home, rest)
}

// PoolPrice prices a kubernetes pool from its spec: the cluster's nodes
// exist, each virtual node at pricePerGPUHour × requirements.gpusPerNode (1
// when unset) (provider.PoolPricer).
func PoolPrice(s model.NodePoolSpec) provider.PoolPrice {
	if s.Kubernetes == nil {
		return provider.PoolPrice{Unknown: "no kubernetes settings"}
	}
	return provider.PoolPrice{Fixed: true, PerNode: s.Kubernetes.PricePerGPUHour * float64(max(s.Requirements.GPUsPerNode, 1))}
}
