package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/podsync"
)

// maxJobName keeps "<job>-<index>", an indexed pod's host name, within a
// DNS label.
const maxJobName = 52

// jobName names the Job that runs the attempt's replicas from rank base on.
func jobName(attemptID string, base int) string {
	return dnsName("gf-"+attemptID+"-r"+strconv.Itoa(base), maxJobName)
}

// serviceName names the headless Service of a gang attempt.
func serviceName(attemptID string) string { return dnsName("gf-"+attemptID, maxJobName) }

// dnsName makes s a DNS label of at most n characters: lower case, invalid
// characters as '-', and a hash suffix when it had to be cut or changed.
func dnsName(s string, n int) string {
	var b strings.Builder
	for _, c := range strings.ToLower(s) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == s && len(out) <= n {
		return out
	}
	sum := sha256.Sum256([]byte(s))
	h := hex.EncodeToString(sum[:4])
	if len(out) > n-len(h)-1 {
		out = strings.TrimRight(out[:n-len(h)-1], "-")
	}
	return out + "-" + h
}

// labelValue makes s a valid label value, hashing what is not.
func labelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	return dnsName(s, validation.LabelValueMaxLength)
}

// jobPlan is what one Job runs: replicas base…base+len(specs)-1 of one
// attempt, all on one virtual node.
type jobPlan struct {
	pool     string
	settings model.KubernetesPoolSettings // defaulted
	node     *nodeTarget
	specs    []agentapi.ReplicaSpec // by rank, contiguous
}

// nodeTarget is where a virtual node's pods may go: the raw label values of
// its group (see group).
type nodeTarget struct {
	id         string
	models     []string
	capacities []string
	region     string
	zone       string
}

func targetOf(grp *group) *nodeTarget {
	return &nodeTarget{id: grp.id, models: grp.models, capacities: grp.capacities, region: grp.key.Region, zone: grp.key.Zone}
}

// worldSize is the number of replicas in the attempt, from the environment
// the control plane hands each replica.
func worldSize(spec agentapi.ReplicaSpec) int {
	if n, err := strconv.Atoi(spec.Env["WORLD_SIZE"]); err == nil && n > 0 {
		return n
	}
	return 1
}

// refusal says why a replica cannot run on Kubernetes at all, or "".
func refusal(spec agentapi.ReplicaSpec, s model.KubernetesPoolSettings) string {
	switch {
	case spec.Archive != "":
		return "uploaded working directories are not supported on Kubernetes pools: build the code into run.image"
	case (spec.Checkpoint != nil || len(spec.Data) > 0) && s.SyncImage == "":
		return "checkpoint storage and datasets (spec.data) on a Kubernetes pool need the pool's kubernetes.syncImage (an image holding the gpufleet binary)"
	case spec.Checkpoint != nil && spec.Checkpoint.Storage.Path != "":
		return "checkpoint storage " + spec.Checkpoint.Storage.String() + " is a folder, which Kubernetes pods do not see: declare s3 storage for the pool"
	case folderData(spec) != "":
		return folderData(spec)
	case spec.Image == "" && s.Image == "":
		return "no container image: set the job's run.image or the pool's kubernetes.image"
	case len(spec.Command) == 0 && spec.Image == "":
		return "no command: set the job's run.command"
	case gated(spec) && s.SyncImage == "":
		return "a service's replica on a Kubernetes pool needs the pool's kubernetes.syncImage (an image holding the gpufleet binary): its gate, which admits only the service's proxy, runs from it"
	case gated(spec) && spec.Env[model.ServiceKeySecret] == "":
		return "a service's replica without its project's replica key (" + model.ServiceKeySecret + "): its gate would admit no request"
	}
	return ""
}

// build returns the Job and, for a gang, the headless Service of its
// peers.
func (p *jobPlan) build() (*batchv1.Job, *corev1.Service) {
	first := p.specs[0]
	base, n, world := first.Rank, len(p.specs), worldSize(first)
	gang := world > 1
	name := jobName(first.AttemptID, base)

	meta := map[string]string{
		LabelManagedBy: p.pool,
		LabelJobID:     labelValue(first.JobID),
		LabelAttempt:   labelValue(first.AttemptID),
		LabelNode:      p.node.id,
	}
	if first.Project != "" {
		meta[LabelProject] = labelValue(first.Project)
	}
	annotations := map[string]string{
		AnnotationAttemptID: first.AttemptID,
		AnnotationRankBase:  strconv.Itoa(base),
	}
	podAnnotations := map[string]string{}
	for k, v := range annotations {
		podAnnotations[k] = v
	}
	for k, v := range first.Tags {
		key := AnnotationTagPrefix + k
		if len(validation.IsQualifiedName(key)) == 0 {
			podAnnotations[key] = v
		}
	}

	image := first.Image
	if image == "" {
		image = p.settings.Image
	}
	gpus := len(first.GPUs)
	container := corev1.Container{
		Name:    ContainerName,
		Image:   image,
		Command: slices.Clone(first.Command),
		Env:     p.env(first, name, gang),
	}
	if w := first.Workdir; path.IsAbs(w) {
		container.WorkingDir = w
	}
	if gpus > 0 {
		q := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
		container.Resources.Limits = corev1.ResourceList{corev1.ResourceName(p.settings.GPUResource): q}
	}
	if first.CPU > 0 || first.Memory > 0 {
		container.Resources.Requests = corev1.ResourceList{}
		if first.CPU > 0 {
			container.Resources.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(first.CPU*1000+0.5), resource.DecimalSI)
		}
		if first.Memory > 0 {
			container.Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(int64(first.Memory), resource.BinarySI)
		}
	}
	pod := corev1.PodSpec{
		RestartPolicy:                corev1.RestartPolicyNever,
		Containers:                   []corev1.Container{container},
		NodeSelector:                 p.settings.NodeSelector,
		Affinity:                     p.node.affinity(p.settings),
		Tolerations:                  tolerations(p.settings, p.node),
		EnableServiceLinks:           new(false),
		AutomountServiceAccountToken: new(false),
	}
	if g := first.Grace.D(); g > 0 {
		pod.TerminationGracePeriodSeconds = new(int64(g.Seconds()))
	}
	container.Lifecycle = preStop(first)
	pod.Containers[0].Lifecycle = container.Lifecycle
	if ps := podsync.Of(first); ps != nil {
		p.withSync(&pod, ps, name)
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.settings.Namespace, Labels: cloneWith(meta, nil), Annotations: annotations},
		Spec: batchv1.JobSpec{
			Parallelism:  new(int32(n)),
			Completions:  new(int32(n)),
			BackoffLimit: new(int32(0)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: cloneWith(meta, nil), Annotations: podAnnotations},
				Spec:       pod,
			},
		},
	}
	if p.settings.QueueName != "" {
		job.Labels[LabelKueueQueue] = p.settings.QueueName
	}
	if rt := first.Runtime.D(); rt > 0 {
		job.Spec.ActiveDeadlineSeconds = new(int64(max(rt.Seconds(), 1)))
	}
	if k := p.settings.KeepFinished; k != nil && k.D() > 0 {
		job.Spec.TTLSecondsAfterFinished = new(int32(math.Ceil(k.D().Seconds())))
	}
	if port := servicePort(first); port > 0 && !gang {
		// A service's replica: a ClusterIP Service in front of its pod's
		// gate (gate.go), which the server's proxy reaches by name (it
		// runs in the cluster, or resolves its DNS).
		gate := gatePort(p.settings, port)
		p.withGate(&job.Spec.Template.Spec, name, port, gate)
		svc := serviceName(first.AttemptID)
		job.Annotations[AnnotationEndpoint] = endpoint(first.AttemptID, p.settings.Namespace, port)
		selector := map[string]string{LabelManagedBy: p.pool, LabelAttempt: labelValue(first.AttemptID)}
		return job, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: p.settings.Namespace, Labels: cloneWith(selector, map[string]string{LabelJobID: meta[LabelJobID]}),
				Annotations: map[string]string{AnnotationAttemptID: first.AttemptID}},
			Spec: corev1.ServiceSpec{
				Selector: selector,
				Ports:    []corev1.ServicePort{{Name: "http", Port: int32(port), TargetPort: intstr.FromInt32(int32(gate))}},
			},
		}
	}
	if !gang {
		return job, nil
	}
	job.Spec.CompletionMode = new(batchv1.IndexedCompletion)
	svc := serviceName(first.AttemptID)
	job.Spec.Template.Spec.Subdomain = svc
	selector := map[string]string{LabelManagedBy: p.pool, LabelAttempt: labelValue(first.AttemptID)}
	service := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: p.settings.Namespace, Labels: cloneWith(selector, map[string]string{LabelJobID: meta[LabelJobID]}),
			Annotations: map[string]string{AnnotationAttemptID: first.AttemptID}},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 selector,
			PublishNotReadyAddresses: true,
		},
	}
	if port, err := strconv.Atoi(first.Env["MASTER_PORT"]); err == nil && port > 0 && port < 65536 {
		service.Spec.Ports = []corev1.ServicePort{{Name: "master", Port: int32(port)}}
	}
	return job, service
}

// servicePort is the port of a service's replica (tagged with its
// service, PORT set), 0 for any other replica.
func servicePort(spec agentapi.ReplicaSpec) int {
	if spec.Tags[model.TagService] == "" {
		return 0
	}
	port, err := strconv.Atoi(spec.Env["PORT"])
	if err != nil || port <= 0 || port > 65535 {
		return 0
	}
	return port
}

// gated reports whether spec is a service's replica, which runs behind a
// gate: one replica with a port.
func gated(spec agentapi.ReplicaSpec) bool { return servicePort(spec) > 0 && worldSize(spec) <= 1 }

// endpoint is where a service replica of attemptID is reached: its
// attempt's Service in namespace, on port.
func endpoint(attemptID, namespace string, port int) string {
	return net.JoinHostPort(serviceName(attemptID)+"."+namespace+".svc", strconv.Itoa(port))
}

// preStop delivers a checkpoint signal other than SIGTERM, which is all the
// kubelet sends: a hook that signals the container's PID 1 (the job's
// command, run without a shell) and then waits out the grace period, after
// which the kubelet sends SIGTERM and, 2 s later, SIGKILL. It needs a
// shell in the image; without one the hook fails, the kubelet logs a
// FailedPreStopHook event and sends SIGTERM at once.
func preStop(spec agentapi.ReplicaSpec) *corev1.Lifecycle {
	sig := strings.TrimPrefix(spec.Signal, "SIG")
	if sig == "" || sig == "TERM" || !slices.Contains(model.Signals, "SIG"+sig) {
		return nil
	}
	script := "kill -s " + sig + " 1"
	if g := int64(spec.Grace.D().Seconds()); g > 0 {
		script += "; sleep " + strconv.FormatInt(g, 10)
	}
	return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", script}}}}
}

// tokenEnv holds a replica's job token; it is secret whatever the control
// plane's SecretEnv says, as is the replica key (model.ServiceKeySecret).
const tokenEnv = "GPUFLEET_JOB_TOKEN"

// secretKeys names the keys of spec.Env whose values go in the Job's
// Secret rather than its pod template, sorted.
func secretKeys(spec agentapi.ReplicaSpec) []string {
	var out []string
	for _, k := range append(slices.Clone(spec.SecretEnv), tokenEnv, model.ServiceKeySecret) {
		if _, ok := spec.Env[k]; ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// secret returns the Secret that holds job's secret environment (the
// Job's name, its labels), or nil when there is none. It names no owner
// (that would need the Job's UID, so it could only follow the Job, and a
// pod could start before it): the runner deletes it.
func (p *jobPlan) secret(job *batchv1.Job) *corev1.Secret {
	first := p.specs[0]
	keys := secretKeys(first)
	ps := podsync.Of(first)
	if len(keys) == 0 && ps == nil {
		return nil
	}
	data := make(map[string][]byte, len(keys)+1)
	for _, k := range keys {
		data[k] = []byte(first.Env[k])
	}
	if ps != nil {
		b, err := json.Marshal(ps)
		if err != nil {
			panic(err) // plain data: cannot fail
		}
		data[podsync.EnvSpec] = b
	}
	labels := cloneWith(job.Labels, nil)
	delete(labels, LabelKueueQueue)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name, Namespace: job.Namespace, Labels: labels,
			Annotations: map[string]string{AnnotationAttemptID: first.AttemptID}},
		Type:      corev1.SecretTypeOpaque,
		Immutable: new(true),
		Data:      data,
	}
}

// env is the replica's environment as a container gets it: the control
// plane's, without CUDA_VISIBLE_DEVICES (the device plugin sets it), the
// secret values by reference to the Job's Secret (named like the Job), and for
// gangs with peer addresses and ranks that Kubernetes knows: MASTER_ADDR is
// rank 0's pod in the gang's Service, RANK and NODE_RANK the pod's
// completion index past the Job's first rank.
func (p *jobPlan) env(spec agentapi.ReplicaSpec, job string, gang bool) []corev1.EnvVar {
	vars := make(map[string]corev1.EnvVar, len(spec.Env))
	for k, v := range spec.Env {
		if k == "CUDA_VISIBLE_DEVICES" {
			continue
		}
		vars[k] = corev1.EnvVar{Name: k, Value: v}
	}
	for _, k := range secretKeys(spec) {
		vars[k] = corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: job}, Key: k}}}
	}
	if gang {
		vars["MASTER_ADDR"] = corev1.EnvVar{Name: "MASTER_ADDR", Value: jobName(spec.AttemptID, 0) + "-0." + serviceName(spec.AttemptID)}
		for _, k := range []string{"RANK", "NODE_RANK"} {
			if spec.Rank == 0 {
				// The Job runs ranks 0…n-1: its completion index is the rank.
				vars[k] = corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + AnnotationCompletionIndex + "']"},
				}}
			} else {
				vars[k] = corev1.EnvVar{Name: k, Value: strconv.Itoa(spec.Rank)}
			}
		}
	}
	out := make([]corev1.EnvVar, 0, len(vars))
	for _, v := range vars {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// affinity pins pods to the nodes of the virtual node's group: its GPU
// model and capacity-type label values, region and zone. A value "" (nodes
// without the label) selects nodes without it.
func (t *nodeTarget) affinity(s model.KubernetesPoolSettings) *corev1.Affinity {
	req := func(key, value string) corev1.NodeSelectorRequirement {
		if value == "" {
			return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpDoesNotExist}
		}
		return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}
	}
	// Terms are ORed: one per combination with an absent label, the rest
	// folded into In lists.
	split := func(values []string) (present []string, absent bool) {
		for _, v := range values {
			if v == "" {
				absent = true
			} else {
				present = append(present, v)
			}
		}
		return present, absent
	}
	dim := func(key string, values []string) [][]corev1.NodeSelectorRequirement {
		present, absent := split(values)
		var alts [][]corev1.NodeSelectorRequirement
		if len(present) > 0 {
			alts = append(alts, []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: present}})
		}
		if absent {
			alts = append(alts, []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpDoesNotExist}})
		}
		return alts
	}
	fixed := []corev1.NodeSelectorRequirement{req(LabelRegion, t.region), req(LabelZone, t.zone)}
	var terms []corev1.NodeSelectorTerm
	for _, m := range dim(s.GPUModelLabel, t.models) {
		for _, c := range dim(s.CapacityTypeLabel, t.capacities) {
			exprs := append(append(append([]corev1.NodeSelectorRequirement{}, m...), c...), fixed...)
			terms = append(terms, corev1.NodeSelectorTerm{MatchExpressions: exprs})
		}
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}}
}

// tolerations accept the taints GPU and spot node pools usually carry:
// the GPU resource's own (nvidia.com/gpu, set by EKS, GKE and the GPU
// operator), AKS's sku=gpu, and for spot groups the spot taints of AKS and
// GKE.
func tolerations(s model.KubernetesPoolSettings, t *nodeTarget) []corev1.Toleration {
	exists := func(key string) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	}
	out := []corev1.Toleration{exists(s.GPUResource)}
	if s.GPUResource != DefaultGPUResource {
		out = append(out, exists(DefaultGPUResource))
	}
	out = append(out, corev1.Toleration{Key: "sku", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
	for _, c := range t.capacities {
		if capacityType(c) == model.Spot {
			out = append(out, exists("kubernetes.azure.com/scalesetpriority"), exists("cloud.google.com/gke-spot"))
			break
		}
	}
	return out
}

func cloneWith(m, extra map[string]string) map[string]string {
	out := make(map[string]string, len(m)+len(extra))
	for k, v := range m {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// replicaOf returns the replica id a pod of one of the driver's Jobs runs,
// from the Job's annotations and the pod's completion index.
func replicaOf(meta metav1.Object) (string, bool) {
	ann := meta.GetAnnotations()
	attempt := ann[AnnotationAttemptID]
	base, err := strconv.Atoi(ann[AnnotationRankBase])
	if attempt == "" || err != nil || base < 0 {
		return "", false
	}
	index := 0
	if v, ok := ann[AnnotationCompletionIndex]; ok {
		if index, err = strconv.Atoi(v); err != nil || index < 0 {
			return "", false
		}
	}
	return model.ReplicaID(attempt, base+index), true
}

// replicasOfJob returns the ids of the replicas a Job runs.
func replicasOfJob(j *batchv1.Job) []string {
	ann := j.Annotations
	attempt := ann[AnnotationAttemptID]
	base, err := strconv.Atoi(ann[AnnotationRankBase])
	if attempt == "" || err != nil || base < 0 {
		return nil
	}
	n := 1
	if j.Spec.Completions != nil {
		n = int(*j.Spec.Completions)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = model.ReplicaID(attempt, base+i)
	}
	return out
}

// describe names an object for logs and reasons.
func describe(kind, name string) string { return fmt.Sprintf("%s %s", kind, name) }
