package kubernetes

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/kubetest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/podsync"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// TestGatedServiceReplicaOnRealCluster runs a service replica through the
// runner against a real control plane (kube-apiserver, the Job
// controller, the garbage collector, KWOK's kubelets): the apiserver
// accepts the pool's default deny, the replica's Service (targeting the
// gate port), its NetworkPolicy and its Job with the gate as a native
// sidecar with a startup probe, and the pod runs. The test then plays the
// kubelet for the gate container: it runs what `gpufleet pod gate` runs,
// with the flags of the stored pod and the key resolved from the stored
// Secret, in front of an app on loopback: a request without the key gets
// 401, with it the app answers. When the replica stops, its Job, Secret,
// Service and NetworkPolicy are deleted; the pool's removal deletes the
// default deny.
func TestGatedServiceReplicaOnRealCluster(t *testing.T) {
	kc := kubetest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := kc.Client()
	pool := "gate-" + strings.ToLower(rnd(t))
	ns := "it-" + pool
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const poolLabel = "it.gpufleet.dev/pool"
	kc.AddGPUNodes(ctx, 1, kubetest.NodeSpec{Labels: map[string]string{poolLabel: pool}})

	// The app the gate fronts, on the pod's (here the test's) loopback.
	appLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "the replica answered %s", r.URL.Path)
	})}
	go app.Serve(appLn)
	defer app.Close()
	appPort := appLn.Addr().(*net.TCPAddr).Port

	settings := model.KubernetesPoolSettings{Namespace: ns, SyncImage: testSyncImage, NodeSelector: map[string]string{poolLabel: pool},
		KeepFinished: new(model.Duration(0))}
	c, err := New(Options{Pool: pool, Settings: settings, Client: cs, RegisterInterval: 50 * time.Millisecond,
		RetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cp := newFakeCP()
	run(t, c, cp)
	var node string
	waitFor(t, "the virtual node", 30*time.Second, func() bool {
		if regs := cp.registrations(); len(regs) > 0 {
			node = regs[len(regs)-1].NodeID
		}
		return node != ""
	})

	s := serviceSpec("j-gated-"+strings.ToLower(rnd(t)), strconv.Itoa(appPort))
	cp.want(node, s)
	waitFor(t, "the replica running", 60*time.Second, func() bool { return cp.status(s.ID).Phase == agentapi.PhaseRunning })
	name, svcName := jobName(s.AttemptID, 0), serviceName(s.AttemptID)

	// What the apiserver holds.
	deny, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, poolPolicyName(pool), metav1.GetOptions{})
	if err != nil || len(deny.Spec.Ingress) != 0 || deny.Spec.PodSelector.MatchLabels[LabelManagedBy] != pool {
		t.Fatalf("the pool's default deny: %+v, %v", deny, err)
	}
	np, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, svcName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the replica's NetworkPolicy: %v", err)
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 0 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.IntValue() != DefaultGatePort {
		t.Errorf("the replica's NetworkPolicy admits %+v, want anyone on %d only", np.Spec.Ingress, DefaultGatePort)
	}
	svc, err := cs.CoreV1().Services(ns).Get(ctx, svcName, metav1.GetOptions{})
	if err != nil || svc.Spec.Ports[0].Port != int32(appPort) || svc.Spec.Ports[0].TargetPort.IntValue() != DefaultGatePort {
		t.Fatalf("the replica's Service: %+v, %v; want %d → %d", svc, err, appPort, DefaultGatePort)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelAttempt + "=" + labelValue(s.AttemptID)})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of the replica: %v, %v", pods, err)
	}
	pod := pods.Items[0]
	i := slices.IndexFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == ContainerGate })
	if i < 0 {
		t.Fatalf("pod %s has no gate container: %+v", pod.Name, pod.Spec.InitContainers)
	}
	gc := pod.Spec.InitContainers[i]
	if gc.RestartPolicy == nil || *gc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("the gate container is not a native sidecar: %+v", gc.RestartPolicy)
	}

	// The kubelet's part: the gate container's command with its
	// environment from the stored Secret.
	flag := func(name string) string {
		j := slices.Index(gc.Command, name)
		if j < 0 || j+1 >= len(gc.Command) {
			t.Fatalf("gate command %q has no %s", gc.Command, name)
		}
		return gc.Command[j+1]
	}
	if flag("--listen") != ":"+strconv.Itoa(DefaultGatePort) || flag("--app-port") != strconv.Itoa(appPort) {
		t.Errorf("gate command %q", gc.Command)
	}
	ref := gc.Env[0].ValueFrom.SecretKeyRef
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the gate's Secret %s: %v", ref.Name, err)
	}
	port, _ := strconv.Atoi(flag("--app-port"))
	// 127.0.0.1:0 rather than the pod's gate port, which this machine's
	// other tests may hold.
	g, err := podsync.OpenGate(podsync.GateConfig{Listen: "127.0.0.1:0", AppPort: port, Key: string(sec.Data[ref.Key])})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	call := func(auth string) (int, string) {
		t.Helper()
		code, body, _ := testutil.Call(t, "GET", "http://"+g.Addr().String()+"/v1/models", "", "Authorization", auth)
		return code, body
	}
	if code, body := call(""); code != http.StatusUnauthorized {
		t.Errorf("without the key: %d %q, want 401", code, body)
	}
	if code, body := call("Bearer " + testReplicaKey); code != http.StatusOK || body != "the replica answered /v1/models" {
		t.Errorf("with the key: %d %q, want the replica's answer", code, body)
	}

	// The replica stops: everything of its attempt goes.
	cp.stop(node, s.AttemptID)
	waitFor(t, "the replica stopped", 60*time.Second, func() bool { return cp.status(s.ID).Phase == agentapi.PhaseExited })
	waitFor(t, "the attempt's objects deleted", 60*time.Second, func() bool {
		gone := func(err error) bool { return apierrors.IsNotFound(err) }
		_, e1 := cs.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		_, e2 := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		_, e3 := cs.CoreV1().Services(ns).Get(ctx, svcName, metav1.GetOptions{})
		_, e4 := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, svcName, metav1.GetOptions{})
		return gone(e1) && gone(e2) && gone(e3) && gone(e4)
	})
	waitFor(t, "only the pool's objects left", 60*time.Second, func() bool {
		objs, err := c.Objects(ctx)
		return err == nil && len(objs) == 1 && objs[0].Kind == "NetworkPolicy" && objs[0].Pool
	})
	if err := c.DeleteObjects(ctx); err != nil {
		t.Fatal(err)
	}
	if objs, err := c.Objects(ctx); err != nil || len(objs) != 0 {
		t.Errorf("after the pool's removal: %+v, %v", objs, err)
	}
}

// waitFor polls cond every 20 ms until it holds, failing after limit.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond) // polling another process; bounded by the deadline
	}
}
