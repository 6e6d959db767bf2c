package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options configure Start. The zero value means defaults.
type Options struct {
	// Bin is a folder holding bin/ (etcd, kube-apiserver,
	// kube-controller-manager, kube-scheduler, kwok) and stages/ (KWOK's
	// stage YAMLs), as tools/kube/build.sh prints. Empty means
	// $GPUFLEET_KUBE_BIN, then build.sh's cache folder (see Start).
	Bin string
	// StartTimeout bounds start-up until every component is ready. Zero
	// means 2 minutes.
	StartTimeout time.Duration
	// ExtraArgs are appended to a component's flags, keyed by binary name
	// ("etcd", "kube-apiserver", "kube-controller-manager",
	// "kube-scheduler", "kwok"); a later flag wins over a default one.
	ExtraArgs map[string][]string
}

// Cluster is a running control plane as one test sees it. Its methods that
// return no error fail that test (t.Fatalf) and must be called from the
// test's goroutine (see For for subtests); the others may be called from
// any goroutine.
type Cluster struct {
	// Kubeconfig is the path of a kubeconfig file for the cluster.
	Kubeconfig string
	// Context is the kubeconfig context to use ("kubetest").
	Context string
	// Dir holds the kubeconfig, the components' data and their logs
	// (logs/<binary>.log).
	Dir string

	tb testing.TB
	cp *controlPlane
}

// Start starts a control plane for t and stops it when t ends (t.Cleanup
// calls Stop). It returns once the API server is ready and the controller
// manager, the scheduler and KWOK answer their health checks; no nodes
// exist yet (AddGPUNodes).
//
// Binaries, in order: opts.Bin; $GPUFLEET_KUBE_BIN; the cache folder of
// tools/kube/build.sh when it is complete (build.sh --cached); with CI=true,
// a cold run of build.sh (about 11 minutes on 2 cores); otherwise t.Skip,
// saying to run tools/kube/build.sh. If the test fails, the last lines of
// every component's log are written to the test log.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	bin, skip, err := findBin(opts.Bin)
	if skip != "" {
		t.Skip(skip)
	}
	if err != nil {
		t.Fatalf("finding Kubernetes binaries: %v", err)
	}
	dir := t.TempDir()
	cp, err := start(dir, bin, opts)
	if cp != nil {
		t.Cleanup(func() {
			if t.Failed() {
				cp.logTails(t)
			}
			cp.stop()
		})
	}
	if err != nil {
		t.Fatalf("starting the Kubernetes control plane: %v", err)
	}
	t.Logf("kubetest: control plane ready in %s (%s)", cp.startup.Round(time.Millisecond), dir)
	return cp.view(t)
}

// shared is the one control plane that Shared hands to every test of a test
// binary. Package-level state is the point here: starting takes seconds, a
// package's tests run in one process, and nothing but Shared and Main
// touches it.
var shared struct {
	once sync.Once
	cp   *controlPlane
	skip string
	err  error
}

// Shared returns a view, for t, of one control plane shared by every test
// of the test binary that calls Shared; the first call starts it with
// default Options. Tests sharing it must keep to their own namespaces and
// node labels. It lives until the test binary exits: the children are
// killed with it (they get SIGKILL when it dies), and its folder is removed
// by Main, or by the next Shared on the machine once its owner is dead.
// Stop on a shared view does nothing. If t fails, the components' log tails
// are written to t's log.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		bin, skip, err := findBin("")
		if skip != "" || err != nil {
			shared.skip, shared.err = skip, err
			return
		}
		sweepSharedDirs()
		dir, err := os.MkdirTemp("", sharedDirPrefix)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644)
		}
		if err != nil {
			shared.err = fmt.Errorf("making the shared folder: %w", err)
			return
		}
		cp, err := start(dir, bin, Options{})
		if err != nil {
			if cp != nil {
				cp.logTails(t)
				cp.stop()
			}
			_ = os.RemoveAll(dir)
			shared.err = err
			return
		}
		t.Logf("kubetest: shared control plane ready in %s (%s)", cp.startup.Round(time.Millisecond), dir)
		cp.shared = true
		shared.cp = cp
	})
	if shared.skip != "" {
		t.Skip(shared.skip)
	}
	if shared.err != nil {
		t.Fatalf("starting the shared Kubernetes control plane: %v", shared.err)
	}
	cp := shared.cp
	t.Cleanup(func() {
		if t.Failed() {
			cp.logTails(t)
		}
	})
	return cp.view(t)
}

// Main runs m and then stops the Shared control plane, if one was started,
// and removes its folder. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	if cp := shared.cp; cp != nil {
		cp.stop()
		_ = os.RemoveAll(cp.dir)
	}
	return code
}

// Stop kills every component (SIGKILL to its PID and process group; the API
// server may ignore SIGTERM for many seconds) and waits for them to exit.
// It is idempotent, registered with t.Cleanup by Start, and does nothing on
// a Shared cluster.
func (c *Cluster) Stop() {
	if c.cp.shared {
		return
	}
	c.cp.stop()
}

// For returns a view of the same control plane whose failing methods fail t
// instead: use it in subtests and other tests that share c.
func (c *Cluster) For(t testing.TB) *Cluster {
	return c.cp.view(t)
}

// RESTConfig returns a new client configuration for the cluster, as the
// admin user, with QPS 1000 and burst 2000.
func (c *Cluster) RESTConfig() *rest.Config {
	return c.cp.restConfig()
}

// Client returns a clientset for the cluster, built once per control plane
// from RESTConfig and safe for concurrent use.
func (c *Cluster) Client() *kubernetes.Clientset {
	return c.cp.client
}

// controlPlane is the set of running components, whoever views it.
type controlPlane struct {
	dir     string
	bin     string
	server  string
	token   string
	startup time.Duration
	shared  bool
	client  *kubernetes.Clientset

	mu    sync.Mutex
	procs []*proc

	nodeSeq  atomic.Int64
	batchSeq atomic.Int64
	stopOnce sync.Once
}

func (cp *controlPlane) view(t testing.TB) *Cluster {
	return &Cluster{
		Kubeconfig: filepath.Join(cp.dir, "kubeconfig"),
		Context:    kubeContext,
		Dir:        cp.dir,
		tb:         t,
		cp:         cp,
	}
}

func (cp *controlPlane) restConfig() *rest.Config {
	return &rest.Config{
		Host:            cp.server,
		BearerToken:     cp.token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             1000,
		Burst:           2000,
	}
}

const (
	kubeContext     = "kubetest"
	sharedDirPrefix = "gpufleet-kubetest-"
	serviceCIDR     = "10.0.0.0/24"
)

// start starts the components in dir. On error it returns the control plane
// as far as it got (for its logs), already stopped, or nil if nothing ran.
func start(dir, bin string, opts Options) (cp *controlPlane, err error) {
	began := time.Now()
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	stages, err := writeFiles(dir, bin)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	token, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		return nil, fmt.Errorf("reading the token: %w", err)
	}
	cp = &controlPlane{
		dir:    dir,
		bin:    bin,
		server: "https://127.0.0.1:" + strconv.Itoa(apiPort),
		token:  string(token),
	}
	if err := writeKubeconfig(filepath.Join(dir, "kubeconfig"), cp.server, cp.token); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			cp.stop()
		}
	}()
	path := func(name string) string { return filepath.Join(dir, name) }
	kubeconfig := path("kubeconfig")
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)

	// 1. etcd and the API server together: the API server retries etcd
	// until it answers.
	etcd, err := cp.spawn(opts, "etcd",
		"--name=default",
		"--data-dir="+path("etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return cp, err
	}
	api, err := cp.spawn(opts, "kube-apiserver",
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(apiPort),
		"--cert-dir="+path("apiserver"),
		"--endpoint-reconciler-type=none",
		"--token-auth-file="+path("tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range="+serviceCIDR,
		"--allow-privileged=true",
		// ServiceAccount: pods then need no ServiceAccount or token.
		// TaintNodesByCondition: new nodes start without the not-ready
		// taint, which the controller manager would otherwise take off
		// one node at a time (8 workers: 1,000 nodes took 15 s longer on
		// 2 busy cores). It still taints nodes that turn NotReady.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		"--service-account-issuer="+cp.server,
		"--service-account-key-file="+path("sa.pub"),
		"--service-account-signing-key-file="+path("sa.key"),
		"--max-requests-inflight=1000",
		"--max-mutating-requests-inflight=500",
		// /debug/pprof, for admins only: benchmarks profile the server.
		"--profiling=true",
	)
	if err != nil {
		return cp, err
	}
	hc := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback test cluster with a self-signed certificate
	}
	if err := waitHealthy(ctx, hc, etcdURL+"/health", "", etcd); err != nil {
		return cp, err
	}
	if err := waitHealthy(ctx, hc, cp.server+"/readyz", cp.token, api); err != nil {
		return cp, err
	}

	// 2. The controllers, once the API server serves, so that none of them
	// gives up waiting for it.
	kcm, err := cp.spawn(opts, "kube-controller-manager",
		"--kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(kcmPort),
		"--cert-dir="+path("kube-controller-manager"),
		"--kube-api-qps=1000",
		"--kube-api-burst=2000",
		"--concurrent-job-syncs=50",
		"--service-account-private-key-file="+path("sa.key"),
		"--use-service-account-credentials=false",
		"--service-cluster-ip-range="+serviceCIDR,
	)
	if err != nil {
		return cp, err
	}
	sched, err := cp.spawn(opts, "kube-scheduler",
		"--kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(schedPort),
		"--cert-dir="+path("kube-scheduler"),
		"--kube-api-qps=1000",
		"--kube-api-burst=2000",
	)
	if err != nil {
		return cp, err
	}
	kwokArgs := []string{
		"--kubeconfig=" + kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + NodeAnnotation + "=fake",
		"--node-ip=127.0.0.1",
		"--cidr=10.240.0.1/16",
		"--node-lease-duration-seconds=40",
		"--server-address=127.0.0.1:" + strconv.Itoa(kwokPort),
	}
	for _, s := range stages {
		kwokArgs = append(kwokArgs, "--config="+s)
	}
	kwok, err := cp.spawn(opts, "kwok", kwokArgs...)
	if err != nil {
		return cp, err
	}
	if err := waitHealthy(ctx, hc, "https://127.0.0.1:"+strconv.Itoa(kcmPort)+"/healthz", "", kcm); err != nil {
		return cp, err
	}
	if err := waitHealthy(ctx, hc, "https://127.0.0.1:"+strconv.Itoa(schedPort)+"/healthz", "", sched); err != nil {
		return cp, err
	}
	if err := waitHealthy(ctx, hc, "http://127.0.0.1:"+strconv.Itoa(kwokPort)+"/healthz", "", kwok); err != nil {
		return cp, err
	}
	cp.client, err = kubernetes.NewForConfig(cp.restConfig())
	if err != nil {
		return cp, fmt.Errorf("making a clientset: %w", err)
	}
	cp.startup = time.Since(began)
	return cp, nil
}

// writeFiles writes the token, the service-account key pair, the token file
// and KWOK's configuration into dir, and returns the files KWOK loads.
func writeFiles(dir, bin string) ([]string, error) {
	for _, sub := range []string{"logs", "etcd"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("making %s: %w", sub, err)
		}
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("making a token: %w", err)
	}
	token := hex.EncodeToString(raw)
	// Service-account tokens need a signing key; 2048-bit RSA made here
	// keeps openssl out of the requirements.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("making the service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("encoding the service-account key: %w", err)
	}
	files := map[string][]byte{
		"token":      []byte(token),
		"tokens.csv": []byte(token + `,admin,admin,"system:masters"` + "\n"),
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		// KWOK's workers and gpufleet's pod completion stages (stages.go).
		"kwok.yaml":            []byte(kwokConfiguration),
		"gpufleet-stages.yaml": []byte(gpufleetStages),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	stages := make([]string, 0, len(kwokStageFiles)+1)
	for _, f := range kwokStageFiles {
		p := filepath.Join(bin, "stages", filepath.FromSlash(f))
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("KWOK stage %s: %w", f, err)
		}
		stages = append(stages, p)
	}
	return append(stages, filepath.Join(dir, "kwok.yaml"), filepath.Join(dir, "gpufleet-stages.yaml")), nil
}

func writeKubeconfig(path, server, token string) error {
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: %[1]s
  cluster:
    server: %[2]q
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: %[3]q
contexts:
- name: %[1]s
  context:
    cluster: %[1]s
    user: admin
current-context: %[1]s
`, kubeContext, server, token)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	return nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitHealthy polls url until it answers 200, p exits or ctx ends.
func waitHealthy(ctx context.Context, hc *http.Client, url, token string, p *proc) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("checking %s: %w", p.name, err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%v); see %s", p.name, p.err, p.log)
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %w)", p.name, ctx.Err(), last)
		case <-tick.C:
		}
	}
}
