package kubernetes

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

func testTarget() *nodeTarget {
	return &nodeTarget{id: "k8s-0a1b2c3d", models: []string{"NVIDIA-H100-80GB-HBM3"}, capacities: []string{"spot"}, region: "us-east-1", zone: "us-east-1a"}
}

func envMap(env []corev1.EnvVar) map[string]string {
	out := map[string]string{}
	for _, e := range env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			out[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		default:
			out[e.Name] = e.Value
		}
	}
	return out
}

func TestBuildSingleReplica(t *testing.T) {
	s := spec("j-abc", 0, 1, 0, 1)
	s.CPU, s.Memory, s.Runtime, s.Workdir = 8, 64*model.GiB, model.Duration(3600e9), "/work"
	plan := jobPlan{pool: "k8s", settings: withDefaults(model.KubernetesPoolSettings{QueueName: "team-a", NodeSelector: map[string]string{"pool": "gpu"}}),
		node: testTarget(), specs: []agentapi.ReplicaSpec{s}}
	job, svc := plan.build()
	if svc != nil {
		t.Errorf("a single replica got a Service: %+v", svc)
	}
	if job.Name != "gf-j-abc-a1-r0" || job.Namespace != DefaultNamespace {
		t.Errorf("job %s/%s", job.Namespace, job.Name)
	}
	wantLabels := map[string]string{LabelManagedBy: "k8s", LabelJobID: "j-abc", LabelAttempt: "j-abc-a1", LabelProject: "nlp", LabelNode: "k8s-0a1b2c3d", LabelKueueQueue: "team-a"}
	if diff := cmp.Diff(wantLabels, job.Labels); diff != "" {
		t.Errorf("job labels (-want +got):\n%s", diff)
	}
	delete(wantLabels, LabelKueueQueue)
	if diff := cmp.Diff(wantLabels, job.Spec.Template.Labels); diff != "" {
		t.Errorf("pod labels (-want +got):\n%s", diff)
	}
	wantAnn := map[string]string{AnnotationAttemptID: "j-abc-a1", AnnotationRankBase: "0", "tags.gpufleet.dev/team": "nlp", "tags.gpufleet.dev/kwok-duration": "2s"}
	if diff := cmp.Diff(wantAnn, job.Spec.Template.Annotations); diff != "" {
		t.Errorf("pod annotations (-want +got):\n%s", diff)
	}
	js := job.Spec
	if *js.Parallelism != 1 || *js.Completions != 1 || *js.BackoffLimit != 0 || js.CompletionMode != nil || *js.ActiveDeadlineSeconds != 3600 {
		t.Errorf("job spec: parallelism %d completions %d backoff %d mode %v deadline %v", *js.Parallelism, *js.Completions, *js.BackoffLimit, js.CompletionMode, js.ActiveDeadlineSeconds)
	}
	pod := js.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever || *pod.TerminationGracePeriodSeconds != 45 || *pod.AutomountServiceAccountToken || *pod.EnableServiceLinks {
		t.Errorf("pod spec: %+v", pod)
	}
	if diff := cmp.Diff(map[string]string{"pool": "gpu"}, pod.NodeSelector); diff != "" {
		t.Errorf("node selector (-want +got):\n%s", diff)
	}
	c := pod.Containers[0]
	if c.Name != ContainerName || c.Image != "ghcr.io/acme/train:1" || c.WorkingDir != "/work" || strings.Join(c.Command, " ") != "python train.py" {
		t.Errorf("container: %+v", c)
	}
	wantRes := corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{DefaultGPUResource: resource.MustParse("2")},
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("64Gi")},
	}
	if diff := cmp.Diff(wantRes, c.Resources, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	env := envMap(c.Env)
	if _, ok := env["CUDA_VISIBLE_DEVICES"]; ok {
		t.Errorf("CUDA_VISIBLE_DEVICES is set; the device plugin sets it")
	}
	if env["GPUFLEET_JOB_ID"] != "j-abc" || env["RANK"] != "0" || env["MASTER_ADDR"] != "127.0.0.1" {
		t.Errorf("env = %v", env)
	}
	wantTerms := []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: DefaultGPUModelLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-H100-80GB-HBM3"}},
		{Key: DefaultCapacityTypeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"spot"}},
		{Key: LabelRegion, Operator: corev1.NodeSelectorOpIn, Values: []string{"us-east-1"}},
		{Key: LabelZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"us-east-1a"}},
	}}}
	if diff := cmp.Diff(wantTerms, pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms); diff != "" {
		t.Errorf("node affinity (-want +got):\n%s", diff)
	}
	tolerated := map[string]bool{}
	for _, tol := range pod.Tolerations {
		tolerated[tol.Key] = tol.Effect == corev1.TaintEffectNoSchedule
	}
	for _, k := range []string{"nvidia.com/gpu", "sku", "kubernetes.azure.com/scalesetpriority", "cloud.google.com/gke-spot"} {
		if !tolerated[k] {
			t.Errorf("no NoSchedule toleration for %s: %+v", k, pod.Tolerations)
		}
	}
}

func TestBuildGang(t *testing.T) {
	specs := []agentapi.ReplicaSpec{spec("j-gang", 0, 4, 0, 1), spec("j-gang", 1, 4, 2, 3), spec("j-gang", 2, 4, 4, 5), spec("j-gang", 3, 4, 6, 7)}
	plan := jobPlan{pool: "k8s", settings: withDefaults(model.KubernetesPoolSettings{}), node: testTarget(), specs: specs}
	job, svc := plan.build()
	if svc == nil {
		t.Fatal("a gang got no Service")
	}
	if *job.Spec.Parallelism != 4 || *job.Spec.Completions != 4 || *job.Spec.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("job spec: %+v", job.Spec)
	}
	if svc.Name != "gf-j-gang-a1" || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses ||
		job.Spec.Template.Spec.Subdomain != svc.Name || svc.Labels[LabelManagedBy] != "k8s" {
		t.Errorf("service %+v, subdomain %q", svc, job.Spec.Template.Spec.Subdomain)
	}
	if diff := cmp.Diff(map[string]string{LabelManagedBy: "k8s", LabelAttempt: "j-gang-a1"}, svc.Spec.Selector); diff != "" {
		t.Errorf("service selector (-want +got):\n%s", diff)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 29512 {
		t.Errorf("service ports = %+v", svc.Spec.Ports)
	}
	env := envMap(job.Spec.Template.Spec.Containers[0].Env)
	want := map[string]string{
		"MASTER_ADDR": "gf-j-gang-a1-r0-0.gf-j-gang-a1", "MASTER_PORT": "29512", "WORLD_SIZE": "4",
		"RANK":      "fieldRef:metadata.annotations['batch.kubernetes.io/job-completion-index']",
		"NODE_RANK": "fieldRef:metadata.annotations['batch.kubernetes.io/job-completion-index']",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	// A rank of a gang whose rank 0 runs elsewhere: its own Job, its rank
	// fixed, the same rendezvous address.
	plan.specs = specs[2:3]
	job, _ = plan.build()
	env = envMap(job.Spec.Template.Spec.Containers[0].Env)
	if job.Name != "gf-j-gang-a1-r2" || env["RANK"] != "2" || env["NODE_RANK"] != "2" || env["MASTER_ADDR"] != want["MASTER_ADDR"] {
		t.Errorf("job %s env %v", job.Name, env)
	}
	if job.Spec.Template.Annotations[AnnotationRankBase] != "2" {
		t.Errorf("rank base = %q", job.Spec.Template.Annotations[AnnotationRankBase])
	}
}

// TestBuildServiceReplica: a service's replica gets a ClusterIP Service on
// its port (to its gate's: gate_test.go), selecting its attempt's pod, and
// its Job names the endpoint (Service DNS name and port) where the
// server's proxy reaches it.
func TestBuildServiceReplica(t *testing.T) {
	s := spec("j-svc", 0, 1, 0, 1)
	s.Tags = map[string]string{model.TagService: "llm"}
	s.Env["PORT"] = "8001"
	plan := jobPlan{pool: "k8s", settings: withDefaults(model.KubernetesPoolSettings{Namespace: "serving"}), node: testTarget(), specs: []agentapi.ReplicaSpec{s}}
	job, svc := plan.build()
	if svc == nil {
		t.Fatal("a service's replica got no Service")
	}
	if svc.Name != "gf-j-svc-a1" || svc.Namespace != "serving" || svc.Spec.ClusterIP == corev1.ClusterIPNone || svc.Annotations[AnnotationAttemptID] != "j-svc-a1" {
		t.Errorf("service %+v", svc)
	}
	if diff := cmp.Diff(map[string]string{LabelManagedBy: "k8s", LabelAttempt: "j-svc-a1"}, svc.Spec.Selector); diff != "" {
		t.Errorf("service selector (-want +got):\n%s", diff)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8001 || svc.Spec.Ports[0].TargetPort.IntValue() != DefaultGatePort {
		t.Errorf("service ports = %+v", svc.Spec.Ports)
	}
	if got := job.Annotations[AnnotationEndpoint]; got != "gf-j-svc-a1.serving.svc:8001" {
		t.Errorf("endpoint annotation %q", got)
	}
	// Without the service tag, or without a port, a replica gets none.
	for name, edit := range map[string]func(*agentapi.ReplicaSpec){
		"no service tag": func(s *agentapi.ReplicaSpec) { s.Tags = nil },
		"no port":        func(s *agentapi.ReplicaSpec) { delete(s.Env, "PORT") },
	} {
		o := s
		o.Env = map[string]string{}
		for k, v := range s.Env {
			o.Env[k] = v
		}
		edit(&o)
		plan.specs = []agentapi.ReplicaSpec{o}
		if job, svc := plan.build(); svc != nil || job.Annotations[AnnotationEndpoint] != "" {
			t.Errorf("%s: service %v, endpoint %q", name, svc, job.Annotations[AnnotationEndpoint])
		}
	}
}

func TestAffinityWithUnlabelledNodes(t *testing.T) {
	target := &nodeTarget{id: "x", models: []string{"L4", "NVIDIA-L4"}, capacities: []string{"", "spot"}}
	terms := target.affinity(withDefaults(model.KubernetesPoolSettings{})).NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	want := []corev1.NodeSelectorTerm{
		{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: DefaultGPUModelLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"L4", "NVIDIA-L4"}},
			{Key: DefaultCapacityTypeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"spot"}},
			{Key: LabelRegion, Operator: corev1.NodeSelectorOpDoesNotExist},
			{Key: LabelZone, Operator: corev1.NodeSelectorOpDoesNotExist},
		}},
		{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: DefaultGPUModelLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"L4", "NVIDIA-L4"}},
			{Key: DefaultCapacityTypeLabel, Operator: corev1.NodeSelectorOpDoesNotExist},
			{Key: LabelRegion, Operator: corev1.NodeSelectorOpDoesNotExist},
			{Key: LabelZone, Operator: corev1.NodeSelectorOpDoesNotExist},
		}},
	}
	if diff := cmp.Diff(want, terms); diff != "" {
		t.Errorf("terms (-want +got):\n%s", diff)
	}
}

func TestNames(t *testing.T) {
	long := strings.Repeat("x", 80)
	for _, tc := range []struct{ in, want string }{
		{"gf-j-abc-a1-r0", "gf-j-abc-a1-r0"},
		{"gf-J_ABC", "gf-j-abc-"},
	} {
		got := dnsName(tc.in, maxJobName)
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("dnsName(%q) = %q, want prefix %q", tc.in, got, tc.want)
		}
	}
	for _, name := range []string{jobName(long, 12), serviceName(long), jobName("j-x-a1", 0)} {
		if len(name) > maxJobName || len(validation.IsDNS1123Label(name+"-99")) > 0 {
			t.Errorf("%q is not a DNS label of at most %d with room for an index", name, maxJobName)
		}
	}
	if jobName(long, 1) == jobName(long, 2) || jobName(long+"a", 1) == jobName(long+"b", 1) {
		t.Errorf("shortened names collide")
	}
	if v := labelValue(long); len(validation.IsValidLabelValue(v)) > 0 {
		t.Errorf("labelValue(long) = %q: not a label value", v)
	}
}

func TestRefusal(t *testing.T) {
	s := spec("j", 0, 1)
	noImage := s
	noImage.Image = ""
	archive := s
	archive.Archive = "sha256:00"
	for name, tc := range map[string]struct {
		spec     agentapi.ReplicaSpec
		settings model.KubernetesPoolSettings
		want     string
	}{
		"ok":                       {s, model.KubernetesPoolSettings{}, ""},
		"no image anywhere":        {noImage, model.KubernetesPoolSettings{}, "no container image"},
		"the pool's image":         {noImage, model.KubernetesPoolSettings{Image: "busybox"}, ""},
		"uploaded workdir refused": {archive, model.KubernetesPoolSettings{}, "uploaded working directories"},
	} {
		if got := refusal(tc.spec, tc.settings); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: refusal = %q, want %q", name, got, tc.want)
		}
	}
}
