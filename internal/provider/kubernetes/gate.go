package kubernetes

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Who can reach a pod (docs/services.md, "Who can reach a replica"). On an
// agent node a service replica sits in a network namespace of its own
// behind the agent's gate; in a pod the same gate (package gate, run by
// `gpufleet pod gate` from the pool's syncImage) is a native sidecar that
// listens on the gate port, which the replica's Service targets, and
// forwards to the replica on the pod's loopback only the requests that
// carry the project's replica key. The key reaches the gate from the
// attempt's Secret; the job's container has it too, as on an agent.
//
// The app shares the pod's network namespace, so its own port is open to
// the pod network unless a NetworkPolicy closes it. With the pool's
// networkPolicy (the default) the runner makes:
//
//   - one per pool, gf-<pool>-deny-ingress: no ingress to any pod of the
//     pool (NetworkPolicies add up: what another one admits still passes);
//   - one per service replica, named like its Service: ingress from
//     anywhere, only on the ports the Service targets (the gate's);
//   - one per gang, named like its headless Service: ingress to its pods
//     from its own pods, on any port (NCCL picks its own).
//
// An attempt's policy is made after its Service and before its Job, and
// deleted before its Service; the pool's goes with the pool. Only a CNI
// that enforces NetworkPolicy (Calico, Cilium, …) acts on them.

// ContainerGate is the name of a service replica's gate container.
const ContainerGate = "gpufleet-gate"

// DefaultGatePort is where a service replica's gate listens in its pod,
// unless the pool's gatePort says otherwise.
const DefaultGatePort = 9980

// gatePortName names the gate's container port.
const gatePortName = "gate"

// gatePort is where the gate of a replica whose app listens on app
// listens: the pool's port, or the next one when the app has it.
func gatePort(s model.KubernetesPoolSettings, app int) int {
	g := s.GatePort
	if g == 0 {
		g = DefaultGatePort
	}
	if g == app {
		if g == 65535 {
			return g - 1
		}
		return g + 1
	}
	return g
}

// policiesOn reports whether the pool makes NetworkPolicies.
func policiesOn(s model.KubernetesPoolSettings) bool {
	return s.NetworkPolicy == nil || *s.NetworkPolicy
}

// withGate adds the gate sidecar of a replica listening on app to pod:
// it listens on gate and reads the replica key from the Secret job; no
// other container of the pod is changed.
func (p *jobPlan) withGate(pod *corev1.PodSpec, job string, app, gate int) {
	c := corev1.Container{
		Name:    ContainerGate,
		Image:   p.settings.SyncImage,
		Command: []string{"gpufleet", "pod", "gate", "--listen", ":" + strconv.Itoa(gate), "--app-port", strconv.Itoa(app)},
		Env: []corev1.EnvVar{{Name: model.ServiceKeySecret, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: job}, Key: model.ServiceKeySecret}}}},
		Ports: []corev1.ContainerPort{{Name: gatePortName, ContainerPort: int32(gate), Protocol: corev1.ProtocolTCP}},
		// A native sidecar: it runs before the job's container starts
		// and until it has ended.
		RestartPolicy: new(corev1.ContainerRestartPolicyAlways),
		// The job's container starts once the gate listens.
		StartupProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(gate))}},
			PeriodSeconds: 1, FailureThreshold: 60,
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          sidecarSecurity(),
	}
	pod.InitContainers = append(pod.InitContainers, c)
}

// policyName names the attempt's NetworkPolicy: its Service's name.
func policyName(attemptID string) string { return serviceName(attemptID) }

// poolPolicyName names the pool's default deny.
func poolPolicyName(pool string) string {
	return dnsName("gf-"+pool+"-deny-ingress", validation.DNS1123LabelMaxLength)
}

// poolPolicy denies all ingress to the pool's pods in namespace ns; the
// attempts' policies admit what they need.
func poolPolicy(pool, ns string) *networkingv1.NetworkPolicy {
	labels := map[string]string{LabelManagedBy: pool}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: poolPolicyName(pool), Namespace: ns, Labels: labels},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: cloneWith(labels, nil)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
}

// policyFor is the NetworkPolicy of the attempt whose Service is svc: for
// a service replica (a ClusterIP Service) ingress from anywhere on the
// ports the Service targets; for a gang (a headless Service) ingress from
// the attempt's own pods on any port. It selects what the Service selects.
// It is a function of the Service alone, so a runner can make it for a
// Service made before it (by a gpufleet that made none).
func policyFor(svc *corev1.Service) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, Labels: cloneWith(svc.Labels, nil),
			Annotations: map[string]string{AnnotationAttemptID: svc.Annotations[AnnotationAttemptID]}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: cloneWith(svc.Spec.Selector, nil)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
			PodSelector: &metav1.LabelSelector{MatchLabels: cloneWith(svc.Spec.Selector, nil)}}}}}
		return np
	}
	var ports []networkingv1.NetworkPolicyPort
	for _, sp := range svc.Spec.Ports {
		target := sp.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(sp.Port) // unset: the Service's port
		}
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		ports = append(ports, networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &target})
	}
	if len(ports) > 0 {
		// A rule without ports would admit every port: none admits none.
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: ports}}
	}
	return np
}
