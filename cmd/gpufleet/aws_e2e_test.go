package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/aws/ec2test"
)

// TestAWSPool is issue 16's done-when, with EC2 an httptest server in this
// test (internal/provider/aws/ec2test) and the "instance" a local
// `gpufleet agent` started as its user-data would start it: a queued job
// scales the aws pool up; the first zone tried (use1-az1) answers
// InsufficientInstanceCapacity and the launch fails over to the other; the
// agent joins with the join token from the user-data, registers, and runs
// the job; a spot notice it reads from instance metadata (a fake IMDSv2
// here) drains its node; deleting the pool terminates every instance.
func TestAWSPool(t *testing.T) {
	ec2 := ec2test.New(t)
	ec2.Mu.Lock()
	ec2.Capacity["g5.xlarge/use1-az1/on-demand"] = 0
	ec2.Mu.Unlock()
	// The SDK's default chain, from the environment only.
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))

	dataDir, listen := t.TempDir(), freePort(t)
	s := startControlPlane(t, dataDir, listen, "--work-root", filepath.Join(sharedDir(t), "work"))
	pool := fmt.Sprintf(`apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: l4}
spec:
  provider: aws
  instanceTypes: [g5.xlarge]
  capacityTypes: [on-demand]
  max: 2
  aws:
    region: us-east-1
    subnets: [subnet-0a1b2c3d4e5f60001, subnet-0a1b2c3d4e5f60002]
    securityGroups: [sg-0123456789abcdef0]
    ami: ami-0123456789abcdef0
    endpoint: %s
    bootstrap:
      server: http://%s
      binaryURL: https://downloads.example.com/gpufleet
      sha256: %s
`, ec2.URL(), listen, strings.Repeat("ab", 32))
	fleetDir := t.TempDir()
	poolFile := filepath.Join(fleetDir, "pool.yaml")
	if err := os.WriteFile(poolFile, []byte(pool), 0o600); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("apply", "-f", poolFile, "-m", "aws pool")

	id := strings.TrimSpace(s.gpufleet("run", "--gpus", "1", "--gpu", "A10G", "--", "sh", "-c", "echo hello from ec2"))
	var inst ec2test.Instance
	deadline := time.Now().Add(120 * time.Second)
	for {
		if live := ec2.Live(); len(live) > 0 {
			inst = live[0]
			break
		}
		if time.Now().After(deadline) {
			expl, _ := s.gpufleetErr("jobs", "explain", id)
			t.Fatalf("no instance launched (EC2 calls: %d DescribeInstanceTypes, %d CreateFleet); explain:\n%s\nserver log:\n%s",
				ec2.CallCount("DescribeInstanceTypes"), ec2.CallCount("CreateFleet"), expl, s.out)
		}
		time.Sleep(100 * time.Millisecond) // polling another process's work; bounded by the deadline
	}
	// The two zones cost the same; use1-az1 is tried first.
	if inst.ZoneID != "use1-az6" || ec2.CallCount("CreateFleet") != 2 {
		t.Errorf("instance in %s after %d CreateFleet calls, want use1-az6 (the zone with capacity) after a failover from use1-az1", inst.ZoneID, ec2.CallCount("CreateFleet"))
	}
	m := regexp.MustCompile(`GPUFLEET_JOIN_TOKEN='([^']+)'`).FindStringSubmatch(inst.UserData)
	if m == nil {
		t.Fatalf("no join token in the user-data:\n%s", inst.UserData)
	}
	md := &fakeIMDS{instanceID: inst.ID}
	mdSrv := httptest.NewServer(md)
	defer mdSrv.Close()
	a := &remoteAgent{t: t, node: inst.ID, dataDir: t.TempDir(),
		args: []string{"--server", "http://" + listen, "--fake-gpus", "1xA10G", "--name", inst.ID, "--label", model.LabelInstance + "=" + inst.ID,
			"--imds", "--imds-endpoint", mdSrv.URL},
		env: append(cleanEnv(), "GPUFLEET_JOIN_TOKEN="+m[1], "GPUFLEET_INSTANCE_ID="+inst.ID)}
	a.start()
	v := s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if v.State != model.JobSucceeded {
		t.Fatalf("job %s (%s)\nserver log:\n%s\nagent log:\n%s", v.State, v.Reason, s.out, a.out)
	}
	if st, err := os.Stat(filepath.Join(a.dataDir, joinedTokenFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the joined agent token: %v, want mode 0600", err)
	}
	var nodes api.NodeList
	if err := json.Unmarshal([]byte(s.gpufleet("nodes", "list", "-o", "json")), &nodes); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range nodes.Nodes {
		if n.Labels[model.LabelInstance] == inst.ID {
			found = true
			if n.Provider != "aws" || n.Pool != "l4" || n.State != model.NodeReady {
				t.Errorf("node %s: provider %s pool %s state %s; want aws, l4, ready", n.ID, n.Provider, n.Pool, n.State)
			}
		}
	}
	if !found {
		t.Fatalf("no node for instance %s: %+v", inst.ID, nodes.Nodes)
	}

	// A spot notice, read by the agent from instance metadata, drains it.
	md.interrupt(time.Now().Add(2 * time.Minute))
	deadline = time.Now().Add(60 * time.Second)
	for {
		draining := false
		if err := json.Unmarshal([]byte(s.gpufleet("nodes", "list", "-o", "json")), &nodes); err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes.Nodes {
			draining = draining || n.Labels[model.LabelInstance] == inst.ID && n.State == model.NodeDraining
		}
		if draining {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node is not draining after its spot notice: %+v\nserver log:\n%s\nagent log:\n%s", nodes.Nodes, s.out, a.out)
		}
		time.Sleep(200 * time.Millisecond) // polling another process's work; bounded by the deadline
	}

	// The pool goes: every instance is terminated.
	if err := os.Remove(poolFile); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fleetDir, "project.yaml"), []byte("apiVersion: gpufleet.dev/v1\nkind: Project\nmetadata: {name: demo}\nspec: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("apply", "-f", fleetDir, "-m", "drop the aws pool")
	deadline = time.Now().Add(60 * time.Second)
	for len(ec2.Live()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("instances left after the pool went: %+v\nserver log:\n%s", ec2.Live(), s.out)
		}
		time.Sleep(100 * time.Millisecond) // polling another process's work; bounded by the deadline
	}
}

// fakeIMDS is the instance metadata the agent reads (IMDSv2): its
// instance id and, once interrupt is called, a spot interruption notice.
type fakeIMDS struct {
	instanceID string
	mu         sync.Mutex
	action     string // the instance-action document; empty: none (404)
}

func (m *fakeIMDS) interrupt(at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.action = fmt.Sprintf(`{"action": "terminate", "time": %q}`, at.UTC().Format("2006-01-02T15:04:05Z"))
}

func (m *fakeIMDS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPut && r.URL.Path == "/latest/api/token" {
		_, _ = w.Write([]byte("imds-session"))
		return
	}
	if r.Header.Get("X-aws-ec2-metadata-token") != "imds-session" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	m.mu.Lock()
	action := m.action
	m.mu.Unlock()
	switch {
	case r.URL.Path == "/latest/meta-data/instance-id":
		_, _ = w.Write([]byte(m.instanceID))
	case r.URL.Path == "/latest/meta-data/spot/instance-action" && action != "":
		_, _ = w.Write([]byte(action))
	default:
		http.NotFound(w, r)
	}
}
