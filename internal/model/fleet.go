package model

import (
	"encoding/json"
	"fmt"
	"math"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Names of the pool drivers gpufleet ships, for code outside the core
// that must name one (wiring, tests, the CLI's defaults). The core never
// branches on them: a pool's driver declares what it can do
// (provider.FixedCapacity, …).
const (
	ProviderSim        = "sim"
	ProviderStatic     = "static"
	ProviderLocal      = "local"
	ProviderKubernetes = "kubernetes"
)

// LabelInstance is the node label carrying the provider's instance id when
// it differs from the node id; drift detection matches nodes to provider
// inventory by it (or by node id when absent).
const LabelInstance = "gpufleet.dev/instance-id"

// NodePool is declared capacity (DESIGN.md §2) as the controller keeps it:
// the spec of the current fleet revision. Treat a published *NodePool as
// immutable.
type NodePool struct {
	Name string       `json:"name"`
	Spec NodePoolSpec `json:"spec"`
	// Revision is the fleet revision that last changed this pool's spec,
	// so a reconciler can tell a changed pool from an unchanged one.
	Revision int `json:"revision"`
}

// NodePoolSpec is what a NodePool manifest declares.
type NodePoolSpec struct {
	// Provider is sim, static, local, kubernetes, ssh or aws.
	Provider string `json:"provider"`
	// Settings for the provider named; only that provider's block may be
	// set.
	Sim        *SimPoolSettings        `json:"sim,omitempty"`
	Static     *StaticPoolSettings     `json:"static,omitempty"`
	Kubernetes *KubernetesPoolSettings `json:"kubernetes,omitempty"`
	SSH        *SSHPoolSettings        `json:"ssh,omitempty"`
	AWS        *AWSPoolSettings        `json:"aws,omitempty"`
	// Regions limits where nodes launch (shell patterns such as "eu-*").
	Regions RegionPolicy `json:"regions,omitzero"`
	// InstanceTypes, when set, are the only instance types launched.
	InstanceTypes []string `json:"instanceTypes,omitempty"`
	// Requirements select instance types by their GPUs.
	Requirements PoolRequirements `json:"requirements,omitzero"`
	// CapacityTypes are on-demand and/or spot (default on-demand).
	CapacityTypes []CapacityType `json:"capacityTypes,omitempty"`
	// Min and Max bound the pool's node count. For a static pool they
	// default to the number of machines.
	Min int `json:"min"`
	Max int `json:"max"`
	// IdleTimeout is how long an empty node above Min lives (default 10m).
	IdleTimeout Duration `json:"idleTimeout,omitempty"`
	// Labels are set on every node of the pool.
	Labels map[string]string `json:"labels,omitempty"`
	// Tags are set on the provider's instances and in cost reports.
	Tags map[string]string `json:"tags,omitempty"`
	// CheckpointStorage is where jobs on this pool keep checkpoints
	// (docs/storage.md); nil keeps them on the node (and, for nodes of the
	// server's machine, in the data dir).
	CheckpointStorage *Storage `json:"checkpointStorage,omitempty"`
	// SharedGPUs marks the pool's GPUs shareable (see Node.SharedGPUs).
	SharedGPUs bool `json:"sharedGPUs,omitempty"`
	// RestartTime is how long a job on this pool's spot capacity takes to
	// resume after an interruption (a replacement node boots, the
	// checkpoint is restored), for the deadline rule; a job's own
	// spec.checkpoint.restart wins. 0 means 5m.
	RestartTime Duration `json:"restartTime,omitempty"`
}

// SimPoolSettings configure a simulated pool.
type SimPoolSettings struct {
	// Clouds are the catalog providers simulated (aws, gcp…); empty means
	// all.
	Clouds []string `json:"clouds,omitempty"`
}

// StaticPoolSettings list owned machines, each running `gpufleet agent`.
type StaticPoolSettings struct {
	Machines []StaticMachine `json:"machines"`
}

// StaticMachine is one owned machine.
type StaticMachine struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// GPUs is "COUNTxMODEL" such as "8xH100".
	GPUs string `json:"gpus"`
	// PricePerHour is the machine's amortised cost in USD per hour.
	PricePerHour float64 `json:"pricePerHour"`
}

// KubernetesPoolSettings name a cluster, how its GPU nodes are labelled,
// where gpufleet's Jobs go and what its GPUs cost (docs/kubernetes.md).
// Zero fields take the defaults noted; the kubernetes provider applies them.
type KubernetesPoolSettings struct {
	// Kubeconfig is the path of a kubeconfig file; empty means $KUBECONFIG,
	// else ~/.kube/config.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Context is the kubeconfig context of the cluster; empty means the
	// file's current context.
	Context string `json:"context"`
	// InCluster uses the service account of the pod gpufleet runs in
	// instead of a kubeconfig.
	InCluster bool `json:"inCluster,omitempty"`
	// Namespace holds gpufleet's Jobs, pods and Services (default
	// "gpufleet").
	Namespace string `json:"namespace,omitempty"`
	// GPUResource is the extended resource pods request (default
	// nvidia.com/gpu).
	GPUResource string `json:"gpuResource,omitempty"`
	// GPUModelLabel is the node label naming the GPU model (default
	// nvidia.com/gpu.product, set by GPU feature discovery).
	GPUModelLabel string `json:"gpuModelLabel,omitempty"`
	// CapacityTypeLabel is the node label saying spot or on-demand
	// (default karpenter.sh/capacity-type).
	CapacityTypeLabel string `json:"capacityTypeLabel,omitempty"`
	// PricePerGPUHour, when set, prices every GPU of the cluster; else a
	// node is priced from the catalog by its instance type.
	PricePerGPUHour float64 `json:"pricePerGPUHour,omitempty"`
	// Image runs jobs that name no run.image.
	Image string `json:"image,omitempty"`
	// SyncImage holds the gpufleet binary; the pods of jobs with
	// checkpoint storage or datasets run their sync containers from it
	// (docs/kubernetes.md). Required with checkpointStorage, and for
	// services: a service replica's gate runs from it.
	SyncImage string `json:"syncImage,omitempty"`
	// GatePort is where a service replica's gate listens in its pod, the
	// port its Service targets (default 9980; the next port when the
	// replica's own PORT is this one).
	GatePort int `json:"gatePort,omitempty"`
	// NetworkPolicy, unless false, has gpufleet make NetworkPolicies: a
	// default deny of ingress to the pool's pods, ingress to a service
	// replica only on its gate's port, and between a gang's pods. They are
	// enforced only by a CNI that enforces NetworkPolicy (docs/services.md).
	NetworkPolicy *bool `json:"networkPolicy,omitempty"`
	// QueueName, when set, is the Kueue LocalQueue gpufleet's Jobs are
	// submitted to (label kueue.x-k8s.io/queue-name).
	QueueName string `json:"queueName,omitempty"`
	// NodeSelector limits the pool to nodes with these labels; pods
	// select them too.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// ClientQPS and ClientBurst bound gpufleet's requests to the API
	// server (defaults 500 and 1000).
	ClientQPS   float64 `json:"clientQPS,omitempty"`
	ClientBurst int     `json:"clientBurst,omitempty"`
	// PendingTimeout is how long a replica's pod may stay unschedulable
	// before gpufleet gives up on it: the replica is lost (its job
	// requeues, perhaps elsewhere) and its Job deleted, so GPUs gpufleet
	// counted as held are not held forever (default 10m).
	PendingTimeout Duration `json:"pendingTimeout,omitempty"`
	// KeepFinished is how long a Job that ended on its own (succeeded or
	// failed) stays in the cluster, with its pods, for kubectl: the
	// cluster's TTL-after-finished controller deletes it this long after
	// it finished (ttlSecondsAfterFinished). Its Secret goes as soon as
	// gpufleet has recorded the end. nil means the default, 10m; 0 means
	// gpufleet deletes the Job as soon as it has recorded the end and
	// shipped the logs.
	KeepFinished *Duration `json:"keepFinished,omitempty"`
}

// PoolRequirements select instance types by their GPUs.
type PoolRequirements struct {
	// GPUModels are catalog model names; empty means any.
	GPUModels    []string `json:"gpuModels,omitempty"`
	MinGPUMemory Bytes    `json:"minGpuMemory,omitempty"`
	// GPUsPerNode selects instance types with exactly this many GPUs.
	GPUsPerNode int `json:"gpusPerNode,omitempty"`
}

// maxPoolNodes bounds min and max.
const maxPoolNodes = 100000

// EffectiveCapacityTypes is CapacityTypes, or on-demand when unset.
func (s *NodePoolSpec) EffectiveCapacityTypes() []CapacityType {
	if len(s.CapacityTypes) == 0 {
		return []CapacityType{OnDemand}
	}
	return s.CapacityTypes
}

// Validate reports every problem in s, with paths under prefix (usually
// "spec"). knownGPU says whether a GPU model exists; nil accepts any name.
func (s *NodePoolSpec) Validate(prefix string, knownGPU func(string) bool) FieldErrors {
	var fe FieldErrors
	p := func(f string) string { return prefix + "." + f }
	switch {
	case s.Provider == "":
		fe.Add(p("provider"), "is required: the pool's driver, such as aws, ssh, static, kubernetes, local or sim")
	case !ValidName(s.Provider):
		fe.Add(p("provider"), fmt.Sprintf("%q is not a driver name (lower-case letters, digits and dashes)", s.Provider))
	}
	// Only the provider's own block may be set; what is in it is its
	// driver's to check (registry.Driver.Check).
	for _, b := range s.settingsBlocks() {
		if b.set && b.name != s.Provider {
			fe.Add(p(b.name), fmt.Sprintf("is set but the provider is %q", s.Provider))
		}
	}
	for i, r := range s.Regions.Allow {
		if _, err := path.Match(r, ""); r == "" || err != nil {
			fe.Add(fmt.Sprintf("%s[%d]", p("regions.allow"), i), fmt.Sprintf("%q is not a region or shell pattern such as eu-*", r))
		}
	}
	for i, r := range s.Regions.Deny {
		if _, err := path.Match(r, ""); r == "" || err != nil {
			fe.Add(fmt.Sprintf("%s[%d]", p("regions.deny"), i), fmt.Sprintf("%q is not a region or shell pattern such as eu-*", r))
		}
	}
	for i, t := range s.InstanceTypes {
		if strings.TrimSpace(t) == "" {
			fe.Add(fmt.Sprintf("%s[%d]", p("instanceTypes"), i), "must not be empty")
		}
	}
	for i, g := range s.Requirements.GPUModels {
		if g == "" || knownGPU != nil && !knownGPU(g) {
			fe.Add(fmt.Sprintf("%s[%d]", p("requirements.gpuModels"), i), fmt.Sprintf("unknown GPU model %q (see `gpufleet offers` for the catalog's models)", g))
		}
	}
	if s.Requirements.MinGPUMemory < 0 {
		fe.Add(p("requirements.minGpuMemory"), "must not be negative")
	}
	if n := s.Requirements.GPUsPerNode; n < 0 || n > 1024 {
		fe.Add(p("requirements.gpusPerNode"), "must be between 0 and 1024 (0: any)")
	}
	for i, ct := range s.CapacityTypes {
		if ct != OnDemand && ct != Spot {
			fe.Add(fmt.Sprintf("%s[%d]", p("capacityTypes"), i), fmt.Sprintf("%q is not %s or %s", ct, OnDemand, Spot))
		}
	}
	if s.Min < 0 || s.Min > maxPoolNodes {
		fe.Add(p("min"), fmt.Sprintf("must be between 0 and %d", maxPoolNodes))
	}
	switch {
	case s.Max < 0 || s.Max > maxPoolNodes:
		fe.Add(p("max"), fmt.Sprintf("must be between 0 and %d", maxPoolNodes))
	case s.Max < s.Min:
		fe.Add(p("max"), fmt.Sprintf("must be at least min (%d)", s.Min))
	}
	if s.IdleTimeout < 0 {
		fe.Add(p("idleTimeout"), "must not be negative")
	}
	if s.RestartTime < 0 || s.RestartTime > Duration(maxRestart) {
		fe.Add(p("restartTime"), "must be between 0 (5m) and 24h")
	}
	if s.CheckpointStorage != nil {
		fe = append(fe, s.CheckpointStorage.Validate(p("checkpointStorage"))...)
	}
	fe = append(fe, validateLabels(p("labels"), s.Labels)...)
	fe = append(fe, validateLabels(p("tags"), s.Tags)...)
	return fe
}

// settingsBlock is one driver's settings block in a NodePoolSpec: the
// name of its field, which is the name of the driver that reads it.
type settingsBlock struct {
	name string
	set  bool
}

// settingsBlocks lists the spec's settings blocks. A driver's block is a
// field here; its contents are checked by the driver's own package.
func (s *NodePoolSpec) settingsBlocks() []settingsBlock {
	return []settingsBlock{{"aws", s.AWS != nil}, {"kubernetes", s.Kubernetes != nil}, {"sim", s.Sim != nil}, {"ssh", s.SSH != nil}, {"static", s.Static != nil}}
}

func validateLabels(prefix string, m map[string]string) FieldErrors {
	var fe FieldErrors
	keys := sortedKeys(m)
	for _, k := range keys {
		if k == "" || len(k) > 253 || len(m[k]) > 255 {
			fe.Add(fmt.Sprintf("%s[%q]", prefix, k), "keys must be 1 to 253 characters and values at most 255")
		}
	}
	return fe
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func bad(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }

// ParseGPUCount parses "COUNTxMODEL" such as "8xH100" (or "MODEL" for one).
func ParseGPUCount(s string) (int, string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, "", fmt.Errorf("is required: COUNTxMODEL such as 8xH100")
	}
	count, model := 1, s
	if i := strings.IndexByte(s, 'x'); i > 0 {
		if n, err := strconv.Atoi(s[:i]); err == nil {
			count, model = n, s[i+1:]
		}
	}
	if count < 1 || count > 1024 {
		return 0, "", fmt.Errorf("%q: the count must be between 1 and 1024", s)
	}
	if model == "" {
		return 0, "", fmt.Errorf("%q has no model; want COUNTxMODEL such as 8xH100", s)
	}
	return count, model, nil
}

// Project is a tenant's settings as the controller keeps them. Admission
// enforces its per-job limits; the scheduler enforces its quota.
type Project struct {
	Name     string      `json:"name"`
	Spec     ProjectSpec `json:"spec"`
	Revision int         `json:"revision"`
}

// ProjectSpec is what a Project manifest declares.
type ProjectSpec struct {
	// Quota caps the GPUs the project's jobs may hold at once, across
	// queues, per GPU model ("*" for any model not listed; a model neither
	// listed nor covered by "*" is not capped). The scheduler enforces it:
	// a job over it waits, and no capacity is bought for it.
	Quota map[string]float64 `json:"quota,omitempty"`
	// AllowedRegions and AllowedGPUs limit where and on what its jobs
	// run; empty means anywhere and anything.
	AllowedRegions []string `json:"allowedRegions,omitempty"`
	AllowedGPUs    []string `json:"allowedGPUs,omitempty"`
	// MaxGPUsPerJob caps replicas × GPUs of one job (0: no cap).
	MaxGPUsPerJob float64 `json:"maxGPUsPerJob,omitempty"`
	// MaxPricePerHour caps the hourly price of capacity bought for one job
	// in USD (0: no cap).
	MaxPricePerHour float64 `json:"maxPricePerHour,omitempty"`
	// Storage declares the project's object storage by name: a job's
	// spec.data source "storage:NAME/PREFIX" reads from Storage[NAME]
	// with its sealed credentials (docs/datasets.md).
	Storage map[string]Storage `json:"storage,omitempty"`
	// Artifacts is where the project's pushed artefacts are kept and how
	// long its checkpoints and artefacts are (docs/artifacts.md).
	Artifacts *ArtifactPolicy `json:"artifacts,omitempty"`
}

// Validate reports every problem in s, with paths under prefix.
func (s *ProjectSpec) Validate(prefix string, knownGPU func(string) bool) FieldErrors {
	var fe FieldErrors
	p := func(f string) string { return prefix + "." + f }
	for _, k := range sortedKeys(s.Quota) {
		v := s.Quota[k]
		qp := fmt.Sprintf("%s[%q]", p("quota"), k)
		if k == "" || k != AnyGPU && knownGPU != nil && !knownGPU(k) {
			fe.Add(qp, fmt.Sprintf("unknown GPU model %q (use a catalog model or \"*\")", k))
		}
		if bad(v) || v < 0 || v > 1e7 {
			fe.Add(qp, "must be between 0 and 10000000 GPUs")
		}
	}
	for i, r := range s.AllowedRegions {
		if _, err := path.Match(r, ""); r == "" || err != nil {
			fe.Add(fmt.Sprintf("%s[%d]", p("allowedRegions"), i), fmt.Sprintf("%q is not a region or shell pattern such as eu-*", r))
		}
	}
	for i, g := range s.AllowedGPUs {
		if g == "" || knownGPU != nil && !knownGPU(g) {
			fe.Add(fmt.Sprintf("%s[%d]", p("allowedGPUs"), i), fmt.Sprintf("unknown GPU model %q", g))
		}
	}
	if bad(s.MaxGPUsPerJob) || s.MaxGPUsPerJob < 0 {
		fe.Add(p("maxGPUsPerJob"), "must not be negative")
	}
	if bad(s.MaxPricePerHour) || s.MaxPricePerHour < 0 {
		fe.Add(p("maxPricePerHour"), "must not be negative")
	}
	for _, name := range sortedKeys(s.Storage) {
		sp := p("storage." + name)
		if !ValidName(name) {
			fe.Add(sp, fmt.Sprintf("%q must be lower-case letters, digits and dashes (at most 63)", name))
		}
		st := s.Storage[name]
		fe = append(fe, st.Validate(sp)...)
	}
	if s.Artifacts != nil {
		fe = append(fe, s.Artifacts.Validate(p("artifacts"))...)
	}
	return fe
}

// Revision is one applied version of the declared fleet: every document of
// kind NodePool, Queue and Project, as canonical JSON. Revisions are
// numbered from 1 and never change once recorded.
type Revision struct {
	Number    int       `json:"number"`
	CreatedAt time.Time `json:"createdAt"`
	// Author is the subject of the token that applied it.
	Author  string `json:"author"`
	Message string `json:"message,omitempty"`
	// RollbackOf is the revision whose documents this one re-applied.
	RollbackOf int `json:"rollbackOf,omitempty"`
	// Commit and CommitAuthor are the git commit (SHA, "Name <email>")
	// whose documents GitOps applied (docs/gitops.md); empty otherwise.
	Commit       string `json:"commit,omitempty"`
	CommitAuthor string `json:"commitAuthor,omitempty"`
	// Digest is the SHA-256 of the documents, hex; equal sets of documents
	// have equal digests.
	Digest    string            `json:"digest"`
	Documents []json.RawMessage `json:"documents"`
}

// maxRestart bounds spec.checkpoint.restart and a pool's restartTime.
const maxRestart = 24 * time.Hour
