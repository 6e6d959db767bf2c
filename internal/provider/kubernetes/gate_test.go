package kubernetes

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

const testReplicaKey = "f00dfeed-replica-key-of-project-nlp"

// serviceSpec is slot 0 of service llm as the services manager submits
// it: tagged, PORT set, the project's replica key in its environment.
func serviceSpec(job string, port string) agentapi.ReplicaSpec {
	s := spec(job, 0, 1, 0)
	s.Tags = map[string]string{model.TagService: "llm", "kwok-duration": "1h"}
	s.Env["PORT"] = port
	s.Env[model.ServiceKeySecret] = testReplicaKey
	s.SecretEnv = []string{model.ServiceKeySecret}
	return s
}

// TestBuildGatedServiceReplica: a service's replica gets the gate as a
// native sidecar from the sync image, listening on the gate port that its
// Service targets, with the replica key only by reference to the
// attempt's Secret; its NetworkPolicy selects the pod and admits the gate
// port only, never the app's own.
func TestBuildGatedServiceReplica(t *testing.T) {
	s := serviceSpec("j-gate", "8001")
	s.SecretEnv = nil // the key is secret whatever SecretEnv says
	plan := jobPlan{pool: "k8s", settings: withDefaults(model.KubernetesPoolSettings{Namespace: "serving", SyncImage: testSyncImage}), node: testTarget(), specs: []agentapi.ReplicaSpec{s}}
	job, svc := plan.build()
	pod := job.Spec.Template.Spec

	if len(pod.InitContainers) != 1 {
		t.Fatalf("init containers %+v, want the gate", pod.InitContainers)
	}
	g := pod.InitContainers[0]
	if g.Name != ContainerGate || g.Image != testSyncImage || g.RestartPolicy == nil || *g.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("gate container %s image %s restart %v; want %s from the sync image, a native sidecar", g.Name, g.Image, g.RestartPolicy, ContainerGate)
	}
	if diff := cmp.Diff([]string{"gpufleet", "pod", "gate", "--listen", ":9980", "--app-port", "8001"}, g.Command); diff != "" {
		t.Errorf("gate command (-want +got):\n%s", diff)
	}
	if len(g.Ports) != 1 || g.Ports[0].ContainerPort != DefaultGatePort || g.StartupProbe == nil || g.StartupProbe.TCPSocket.Port.IntValue() != DefaultGatePort {
		t.Errorf("gate ports %+v, startup probe %+v; want %d", g.Ports, g.StartupProbe, DefaultGatePort)
	}
	sc := g.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("gate security context %+v; want non-root, read-only root, no escalation, no capabilities", sc)
	}
	wantRef := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: job.Name}, Key: model.ServiceKeySecret}}
	if diff := cmp.Diff([]corev1.EnvVar{{Name: model.ServiceKeySecret, ValueFrom: wantRef}}, g.Env); diff != "" {
		t.Errorf("gate environment (-want +got):\n%s", diff)
	}
	// The job's container has the key as on an agent, by reference too.
	main := pod.Containers[0]
	if i := slices.IndexFunc(main.Env, func(e corev1.EnvVar) bool { return e.Name == model.ServiceKeySecret }); i < 0 || main.Env[i].Value != "" || !cmp.Equal(main.Env[i].ValueFrom, wantRef) {
		t.Errorf("the job's container gets the key as %+v, want by reference to the Secret", main.Env)
	}
	b, _ := json.Marshal(job)
	if strings.Contains(string(b), testReplicaKey) {
		t.Error("the Job holds the replica key")
	}
	sec := plan.secret(job)
	if sec == nil || string(sec.Data[model.ServiceKeySecret]) != testReplicaKey {
		t.Fatalf("the Secret does not hold the replica key: %v", sec)
	}

	// The Service: the replica's PORT, to the gate.
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8001 || svc.Spec.Ports[0].TargetPort != intstr.FromInt32(DefaultGatePort) {
		t.Errorf("service ports %+v, want 8001 → %d", svc.Spec.Ports, DefaultGatePort)
	}
	if got := job.Annotations[AnnotationEndpoint]; got != "gf-j-gate-a1.serving.svc:8001" {
		t.Errorf("endpoint %q", got)
	}

	np := policyFor(svc)
	if np.Name != svc.Name || np.Namespace != "serving" || np.Annotations[AnnotationAttemptID] != s.AttemptID || np.Labels[LabelManagedBy] != "k8s" {
		t.Errorf("policy meta %+v", np.ObjectMeta)
	}
	if !selects(np.Spec.PodSelector, job.Spec.Template.Labels) {
		t.Errorf("policy selector %v does not select the pod (labels %v)", np.Spec.PodSelector, job.Spec.Template.Labels)
	}
	other := cloneWith(job.Spec.Template.Labels, map[string]string{LabelAttempt: "j-other-a1"})
	if selects(np.Spec.PodSelector, other) {
		t.Error("the policy selects another attempt's pods")
	}
	tcp := corev1.ProtocolTCP
	gatePort := intstr.FromInt32(DefaultGatePort)
	want := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelManagedBy: "k8s", LabelAttempt: s.AttemptID}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &gatePort}}}},
	}
	if diff := cmp.Diff(want, np.Spec); diff != "" {
		t.Errorf("policy (-want +got):\n%s", diff)
	}
}

func selects(sel metav1.LabelSelector, podLabels map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(&sel)
	return err == nil && !s.Empty() && s.Matches(labels.Set(podLabels))
}

// TestGatePort: the pool's port, the default, and the next port when the
// replica's own PORT is the gate's.
func TestGatePort(t *testing.T) {
	for name, tc := range map[string]struct {
		pool, app, want int
	}{
		"default":             {0, 8000, DefaultGatePort},
		"the pool's":          {7000, 8000, 7000},
		"app on the default":  {0, DefaultGatePort, DefaultGatePort + 1},
		"app on the pool's":   {7000, 7000, 7001},
		"app on the last one": {65535, 65535, 65534},
	} {
		if got := gatePort(model.KubernetesPoolSettings{GatePort: tc.pool}, tc.app); got != tc.want {
			t.Errorf("%s: gate port %d, want %d", name, got, tc.want)
		}
	}
}

// TestGangAndPoolPolicies: a gang's pods admit one another on any port
// and nothing else; the pool's default deny selects every pod of the pool
// and admits nothing; a ClusterIP Service without ports admits nothing
// (a rule without ports would admit every port).
func TestGangAndPoolPolicies(t *testing.T) {
	plan := jobPlan{pool: "k8s", settings: withDefaults(model.KubernetesPoolSettings{}), node: testTarget(),
		specs: []agentapi.ReplicaSpec{spec("j-gang", 0, 2, 0), spec("j-gang", 1, 2, 1)}}
	job, svc := plan.build()
	np := policyFor(svc)
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 0 || len(np.Spec.Ingress[0].From) != 1 {
		t.Fatalf("gang policy ingress %+v, want one rule from the gang's pods, any port", np.Spec.Ingress)
	}
	peer := np.Spec.Ingress[0].From[0]
	if peer.NamespaceSelector != nil || peer.IPBlock != nil || peer.PodSelector == nil || !selects(*peer.PodSelector, job.Spec.Template.Labels) || !selects(np.Spec.PodSelector, job.Spec.Template.Labels) {
		t.Errorf("gang policy %+v does not select and admit exactly the gang's pods", np.Spec)
	}
	if selects(*peer.PodSelector, cloneWith(job.Spec.Template.Labels, map[string]string{LabelAttempt: "j-x-a1"})) {
		t.Error("the gang's policy admits another attempt's pods")
	}

	deny := poolPolicy("k8s", "gpufleet")
	if deny.Name != "gf-k8s-deny-ingress" || len(deny.Spec.Ingress) != 0 || !slices.Equal(deny.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("pool policy %+v, want an ingress policy with no rule", deny)
	}
	if !selects(deny.Spec.PodSelector, job.Spec.Template.Labels) || selects(deny.Spec.PodSelector, map[string]string{LabelManagedBy: "other-pool"}) {
		t.Errorf("pool policy selector %v: want the pool's pods only", deny.Spec.PodSelector)
	}

	bare := svc.DeepCopy()
	bare.Spec.ClusterIP, bare.Spec.Ports = "", nil
	if np := policyFor(bare); len(np.Spec.Ingress) != 0 {
		t.Errorf("a Service without ports: ingress %+v, want none", np.Spec.Ingress)
	}
}

// TestServiceReplicaRefusals: without the sync image (the gate's) or the
// replica key a service's replica is not run.
func TestServiceReplicaRefusals(t *testing.T) {
	s := serviceSpec("j-ref", "8000")
	if got := refusal(s, model.KubernetesPoolSettings{Image: "x"}); !strings.Contains(got, "kubernetes.syncImage") {
		t.Errorf("no sync image: %q", got)
	}
	delete(s.Env, model.ServiceKeySecret)
	if got := refusal(s, model.KubernetesPoolSettings{SyncImage: testSyncImage}); !strings.Contains(got, model.ServiceKeySecret) {
		t.Errorf("no key: %q", got)
	}
	if got := refusal(serviceSpec("j-ok", "8000"), model.KubernetesPoolSettings{SyncImage: testSyncImage}); got != "" {
		t.Errorf("a gated replica refused: %q", got)
	}
}

// TestPoliciesMadeAndDeletedWithTheReplica runs a service replica on the
// fake clientset: the pool's default deny exists once the runner runs;
// the replica's NetworkPolicy is made after its Service and before its
// Job, and goes, with the Service, once the replica has ended; removing
// the pool removes the default deny.
func TestPoliciesMadeAndDeletedWithTheReplica(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{SyncImage: testSyncImage}, h100("n1").obj())
	h.run()
	pols := h.cs.NetworkingV1().NetworkPolicies(DefaultNamespace)
	eventually(t, "the pool's default deny", func() bool {
		_, err := pols.Get(bg, "gf-k8s-deny-ingress", metav1.GetOptions{})
		return err == nil
	})
	s := serviceSpec("j-np", "8000")
	h.cp.want(h.node, s)
	job := h.job("gf-j-np-a1-r0")
	if _, err := pols.Get(bg, "gf-j-np-a1", metav1.GetOptions{}); err != nil {
		t.Fatalf("the replica's NetworkPolicy: %v", err)
	}
	var order []string
	for _, a := range h.cs.Actions() {
		if a.GetVerb() == "create" && slices.Contains([]string{"services", "networkpolicies", "jobs"}, a.GetResource().Resource) {
			order = append(order, a.GetResource().Resource)
		}
	}
	if diff := cmp.Diff([]string{"networkpolicies", "services", "networkpolicies", "jobs"}, order); diff != "" {
		t.Errorf("creates (-want +got), the pool's policy first:\n%s", diff)
	}
	pod := podOf(job, 0, "n1", corev1.PodRunning)
	h.createPod(pod)
	h.waitPhase(s.ID, agentapi.PhaseRunning)
	h.cp.stop(h.node, s.AttemptID)
	eventually(t, "the Job deleted", func() bool { return h.jobGone(job.Name) })
	// The garbage collector's part.
	if err := h.cs.CoreV1().Pods(DefaultNamespace).Delete(bg, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitPhase(s.ID, agentapi.PhaseExited)
	eventually(t, "the policy and Service gone", func() bool {
		_, perr := pols.Get(bg, "gf-j-np-a1", metav1.GetOptions{})
		_, serr := h.cs.CoreV1().Services(DefaultNamespace).Get(bg, "gf-j-np-a1", metav1.GetOptions{})
		return apierrors.IsNotFound(perr) && apierrors.IsNotFound(serr)
	})
	objs, err := h.c.Objects(bg)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, o := range objs {
		left = append(left, o.Kind+"/"+o.Name+poolMark(o))
	}
	if diff := cmp.Diff([]string{"NetworkPolicy/gf-k8s-deny-ingress (pool)"}, left); diff != "" {
		t.Errorf("objects left (-want +got):\n%s", diff)
	}
	if err := h.c.DeleteObjects(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := pols.Get(bg, "gf-k8s-deny-ingress", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pool's default deny after the pool's removal: %v", err)
	}
}

func poolMark(o Object) string {
	if o.Pool {
		return " (pool)"
	}
	return ""
}

// TestPoliciesOff: with networkPolicy: false the runner makes none, and
// deletes those an earlier runner made.
func TestPoliciesOff(t *testing.T) {
	earlier := poolPolicy("k8s", DefaultNamespace)
	h := newHarness(t, model.KubernetesPoolSettings{SyncImage: testSyncImage, NetworkPolicy: new(false)}, h100("n1").obj(), earlier)
	h.run()
	s := serviceSpec("j-off", "8000")
	h.cp.want(h.node, s)
	h.job("gf-j-off-a1-r0")
	eventually(t, "the earlier runner's policy gone", func() bool {
		l, err := h.cs.NetworkingV1().NetworkPolicies(DefaultNamespace).List(bg, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0
	})
	if got := h.actions("create", "networkpolicies"); len(got) != 0 {
		t.Errorf("%d NetworkPolicies created, want none", len(got))
	}
}

// TestPolicySweep: a runner that starts finds a live service replica's
// Service without a policy (made by a gpufleet that made none) and gives
// it one admitting what its Service targets, and deletes an attempt's
// policy whose Service and Jobs are gone.
func TestPolicySweep(t *testing.T) {
	s := serviceSpec("j-old", "8000")
	plan := jobPlan{pool: "k8s", settings: withDefaults(model.KubernetesPoolSettings{SyncImage: testSyncImage}), node: testTarget(), specs: []agentapi.ReplicaSpec{s}}
	job, svc := plan.build()
	svc.Spec.Ports[0].TargetPort = intstr.FromInt32(8000) // as made before gates
	stale := policyFor(svc)
	stale.Name, stale.Annotations[AnnotationAttemptID] = "gf-j-gone-a1", "j-gone-a1"
	h := newHarness(t, model.KubernetesPoolSettings{SyncImage: testSyncImage}, h100("n1").obj(), job, svc, stale)
	h.cp.want(h.node, s) // the replica runs on: its Job is adopted
	h.run()
	pols := h.cs.NetworkingV1().NetworkPolicies(DefaultNamespace)
	var np *networkingv1.NetworkPolicy
	eventually(t, "the old Service's policy", func() bool {
		var err error
		np, err = pols.Get(bg, svc.Name, metav1.GetOptions{})
		return err == nil
	})
	if p := np.Spec.Ingress[0].Ports; len(p) != 1 || p[0].Port.IntValue() != 8000 {
		t.Errorf("old Service's policy ports %+v, want its target 8000", p)
	}
	eventually(t, "the stale policy gone", func() bool {
		_, err := pols.Get(bg, "gf-j-gone-a1", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
