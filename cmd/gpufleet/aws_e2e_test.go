package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/aws/ec2test"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// TestAWSPool is issue 16's done-when, with EC2 an httptest server in this
// test (internal/provider/aws/ec2test), instance metadata AWS's own
// ec2-metadata-mock, and each "instance" a local `gpufleet agent` started
// as its user-data would start it: a queued 8-GPU spot job scales the aws
// pool up; the cheapest offer by cost to finish (p4d.24xlarge spot in
// use1-az1) answers InsufficientInstanceCapacity and the launch fails
// over to the next (p5.48xlarge spot in use1-az6); the agent joins with
// the join token from the user-data, registers, and runs the job; a spot
// interruption scheduled in ec2-metadata-mock drains its node; the job
// resumes on a second instance and finishes there; deleting the pool
// terminates every instance (the inventory by tag is empty).
func TestAWSPool(t *testing.T) {
	mockBin := testutil.MetadataMockBinary(t)
	t.Setenv("GPUFLEET_EC2_METADATA_MOCK", mockBin)
	ec2 := ec2test.New(t)
	ec2.Mu.Lock()
	ec2.Capacity["p4d.24xlarge/use1-az1/spot"] = 0
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
metadata: {name: train}
spec:
  provider: aws
  requirements: {gpusPerNode: 8}
  capacityTypes: [spot]
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

	// The first attempt runs until its node is drained; the next one
	// finishes.
	id := strings.TrimSpace(s.gpufleet("run", "--gpus", "8", "--spot", "required", "--grace", "5s", "--",
		"sh", "-c", `if [ "$GPUFLEET_ATTEMPT" = 1 ]; then echo first attempt; exec sleep 600; fi; echo resumed on attempt $GPUFLEET_ATTEMPT`))
	inst := waitInstance(t, s, ec2, id, "")
	if inst.InstanceType != "p5.48xlarge" || inst.ZoneID != "use1-az6" || inst.Lifecycle != "spot" || ec2.CallCount("CreateFleet") != 2 {
		t.Errorf("instance %s %s in %s after %d CreateFleet calls, want spot p5.48xlarge in use1-az6 after a failover from p4d.24xlarge (no capacity)",
			inst.Lifecycle, inst.InstanceType, inst.ZoneID, ec2.CallCount("CreateFleet"))
	}
	// The agent's instance metadata: ec2-metadata-mock, started on this
	// port once the job runs, with the interruption scheduled then.
	imdsAddr := freePort(t)
	a := startInstanceAgent(t, s, inst, "--imds", "--imds-endpoint", "http://"+imdsAddr)
	s.waitJob(id, func(v api.JobView) bool { return v.State == model.JobRunning }, "running")
	if st, err := os.Stat(filepath.Join(a.dataDir, joinedTokenFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the joined agent token: %v, want mode 0600", err)
	}
	first := nodeOfInstance(t, s, inst.ID)
	if first.Provider != "aws" || first.Pool != "train" || first.State != model.NodeReady {
		t.Errorf("node %s: provider %s pool %s state %s; want aws, train, ready", first.ID, first.Provider, first.Pool, first.State)
	}

	// A spot interruption, one second after the mock starts.
	testutil.StartMetadataMock(t, testutil.MetadataMock{Addr: imdsAddr, InstanceID: inst.ID, Args: []string{"spot", "--mock-delay-sec", "1"}})
	deadline := time.Now().Add(90 * time.Second)
	for nodeOfInstance(t, s, inst.ID).State != model.NodeDraining {
		if time.Now().After(deadline) {
			t.Fatalf("the node is not draining after its spot notice\nserver log:\n%s\nagent log:\n%s", s.out, a.out)
		}
		time.Sleep(200 * time.Millisecond) // polling another process's work; bounded by the deadline
	}

	// The job resumes on a second instance and finishes there.
	inst2 := waitInstance(t, s, ec2, id, inst.ID)
	b := startInstanceAgent(t, s, inst2)
	v := s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if v.State != model.JobSucceeded {
		t.Fatalf("job %s (%s)\nserver log:\n%s\nfirst agent log:\n%s\nsecond agent log:\n%s", v.State, v.Reason, s.out, a.out, b.out)
	}
	second := nodeOfInstance(t, s, inst2.ID)
	att := v.AttemptDetails
	if len(att) < 2 || att[0].State != model.AttemptPreempted || att[0].Replicas[0].NodeID != first.ID ||
		att[len(att)-1].State != model.AttemptSucceeded || att[len(att)-1].Replicas[0].NodeID != second.ID {
		var got []string
		for _, a := range att {
			got = append(got, fmt.Sprintf("%d %s on %s", a.Number, a.State, a.Replicas[0].NodeID))
		}
		t.Errorf("attempts %v; want the first preempted on %s, the last succeeded on %s", got, first.ID, second.ID)
	}
	if logs := s.gpufleet("jobs", "logs", id); !strings.Contains(logs, "resumed on attempt") {
		t.Errorf("the last attempt's log: %q", logs)
	}

	// The pool goes: every instance is terminated, and EC2 lists none by
	// the pool's tags.
	if err := os.Remove(poolFile); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fleetDir, "project.yaml"), []byte("apiVersion: gpufleet.dev/v1\nkind: Project\nmetadata: {name: demo}\nspec: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("apply", "-f", fleetDir, "-m", "drop the aws pool")
	deadline = time.Now().Add(60 * time.Second)
	for len(ec2.Tagged("gpufleet:pool", "train")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("instances tagged with the pool after it went: %+v\nserver log:\n%s", ec2.Tagged("gpufleet:pool", "train"), s.out)
		}
		time.Sleep(100 * time.Millisecond) // polling another process's work; bounded by the deadline
	}
}

// waitInstance waits for a live instance other than not and returns it.
func waitInstance(t *testing.T, s *serverProc, ec2 *ec2test.Server, job, not string) ec2test.Instance {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		for _, in := range ec2.Live() {
			if in.ID != not {
				return in
			}
		}
		if time.Now().After(deadline) {
			expl, _ := s.gpufleetErr("jobs", "explain", job)
			t.Fatalf("no instance launched (EC2 calls: %d DescribeInstanceTypes, %d CreateFleet); explain:\n%s\nserver log:\n%s",
				ec2.CallCount("DescribeInstanceTypes"), ec2.CallCount("CreateFleet"), expl, s.out)
		}
		time.Sleep(100 * time.Millisecond) // polling another process's work; bounded by the deadline
	}
}

// startInstanceAgent starts the agent of instance in as its user-data
// would: with the join token the user-data carries and its instance id.
func startInstanceAgent(t *testing.T, s *serverProc, in ec2test.Instance, extra ...string) *remoteAgent {
	t.Helper()
	m := regexp.MustCompile(`GPUFLEET_JOIN_TOKEN='([^']+)'`).FindStringSubmatch(in.UserData)
	if m == nil {
		t.Fatalf("no join token in the user-data:\n%s", in.UserData)
	}
	a := &remoteAgent{t: t, node: in.ID, dataDir: t.TempDir(),
		args: append([]string{"--server", "http://" + s.listen, "--fake-gpus", "8xH100", "--name", in.ID, "--label", model.LabelInstance + "=" + in.ID}, extra...),
		env:  append(cleanEnv(), "GPUFLEET_JOIN_TOKEN="+m[1], "GPUFLEET_INSTANCE_ID="+in.ID)}
	a.start()
	return a
}

// nodeOfInstance returns the node whose instance is id.
func nodeOfInstance(t *testing.T, s *serverProc, id string) model.NodeInfo {
	t.Helper()
	nodes := decodeItems[model.NodeInfo](t, s.gpufleet("nodes", "list", "-o", "json"))
	for _, n := range nodes {
		if n.Labels[model.LabelInstance] == id {
			return n
		}
	}
	t.Fatalf("no node for instance %s: %+v", id, nodes)
	return model.NodeInfo{}
}
