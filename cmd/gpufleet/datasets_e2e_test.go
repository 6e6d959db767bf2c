package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/s3test"
)

// datasetJob reads its dataset where spec.data put it, tries to write
// into it and to list the node's cache, then waits for the release mark.
const datasetJob = `cd "$GPUFLEET_DATA_DIR"
cat data/labels.txt
echo "sha256 $(sha256sum data/train/a.bin | cut -c1-64)"
if (echo x > data/new) 2>/dev/null; then echo "data is WRITABLE"; else echo "data is read-only"; fi
if ls "$(dirname "$(readlink data)")" >/dev/null 2>&1; then echo "cache is LISTABLE"; else echo "cache is not listable"; fi
while [ ! -e %s/release ]; do sleep 0.05; done`

// TestDatasetsAreCachedPerNode is issue 17's dataset done-when against the
// real binary, two agents with their own data dirs and versitygw: two jobs
// reading one dataset run at once on two nodes, each node downloads it
// once; a third job goes to a node that holds it although a node without
// it fits better, hits that node's cache, and explain shows why. Then each
// fault gives a clear error naming the field, source or object.
func TestDatasetsAreCachedPerNode(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	raw := srv.CreateBucket(t, "lake")
	blob := make([]byte, 3<<20)
	rand.Read(blob)
	sum := sha256.Sum256(blob)
	put := func(key string, data []byte) {
		t.Helper()
		if _, err := srv.Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("lake"), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
			t.Fatal(err)
		}
	}
	put("imagenet/train/a.bin", blob)
	put("imagenet/labels.txt", []byte("cat\ndog\n"))
	put("corrupt/x.bin", []byte("original bytes"))

	s := startControlPlane(t, t.TempDir(), freePort(t))
	for name, value := range map[string]string{"S3_LAKE": s3test.AccessKey + ":" + s3test.SecretKey, "S3_BAD": s3test.AccessKey + ":wrong-secret"} {
		set := s.gpufleetCmd("secrets", "set", "default", name)
		set.Stdin = strings.NewReader(value)
		if out, err := set.CombinedOutput(); err != nil {
			t.Fatalf("secrets set: %v\n%s", err, out)
		}
	}
	project := filepath.Join(t.TempDir(), "project.yaml")
	if err := os.WriteFile(project, []byte(fmt.Sprintf(`apiVersion: gpufleet.dev/v1
kind: Project
metadata: {name: default}
spec:
  storage:
    lake:        {s3: {bucket: lake, endpoint: %[1]q, pathStyle: true, credentialsRef: default/S3_LAKE}}
    badkey:      {s3: {bucket: lake, endpoint: %[1]q, pathStyle: true, credentialsRef: default/S3_BAD}}
    nobucket:    {s3: {bucket: missing, endpoint: %[1]q, pathStyle: true, credentialsRef: default/S3_LAKE}}
    unreachable: {s3: {bucket: lake, endpoint: "http://127.0.0.1:1", pathStyle: true, credentialsRef: default/S3_LAKE}}
`, srv.Endpoint)), 0o600); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("apply", "-f", project)

	agents := map[string]*remoteAgent{}
	for _, n := range []string{"node-a", "node-b"} {
		agents[n] = startDataAgent(t, s, n, "2xH100")
	}
	s.waitNodes(2)
	marks := sharedDir(t)

	// 1. Two jobs reading one dataset run at once, one per node (each
	// takes a whole node), and each node downloads it once.
	var first []string
	for range 2 {
		first = append(first, strings.TrimSpace(s.gpufleet("run", "--gpus", "2", "--data", "storage:lake/imagenet:data/", "--", "sh", "-c", fmt.Sprintf(datasetJob, marks))))
	}
	nodeOf := map[string]string{}
	for _, id := range first {
		s.waitJob(id, func(v api.JobView) bool { return v.State == model.JobRunning }, "ran")
		waitLog(t, s, id, 1, "cache is")
		nodeOf[id] = s.attemptNode(id)
	}
	if nodeOf[first[0]] == nodeOf[first[1]] {
		t.Fatalf("both jobs ran on %s", nodeOf[first[0]])
	}
	want := fmt.Sprintf("cat\ndog\nsha256 %s\ndata is read-only\ncache is not listable\n", hex.EncodeToString(sum[:]))
	for _, id := range first {
		if got := s.gpufleet("jobs", "logs", id); got != want {
			t.Errorf("job %s logged\n%s\nwant\n%s", id, got, want)
		}
	}
	if err := os.WriteFile(filepath.Join(marks, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range first {
		if v := s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended"); v.State != model.JobSucceeded {
			t.Fatalf("job %s %s: %s", id, v.State, v.Reason)
		}
	}
	for n, a := range agents {
		if got := fetches(a.out.String()); got != "false" {
			t.Errorf("%s fetched the dataset with cache hits %q, want one download (false)\nagent log:\n%s", n, got, tail(a.out.String()))
		}
	}

	// 2. A node without the data that fits a 1-GPU job exactly joins; the
	// job goes to a node holding the data anyway and hits its cache.
	empty := startDataAgent(t, s, "node-0", "1xH100")
	s.waitNodes(3)
	third := strings.TrimSpace(s.gpufleet("run", "--gpus", "1", "--data", "storage:lake/imagenet:data/", "--", "sh", "-c", fmt.Sprintf(datasetJob, marks)))
	if v := s.waitJob(third, func(v api.JobView) bool { return v.State.Terminal() }, "ended"); v.State != model.JobSucceeded {
		t.Fatalf("third job %s: %s", v.State, v.Reason)
	}
	node := s.attemptNode(third)
	var ex api.Explanation
	if err := json.Unmarshal([]byte(s.gpufleet("explain", third, "-o", "json")), &ex); err != nil {
		t.Fatal(err)
	}
	if len(ex.Placement) != 1 || ex.Placement[0].Code != "data-local" || ex.Placement[0].Scope != "node/"+node || !strings.Contains(ex.Placement[0].Message, "holds 1 of the job's 1 datasets") {
		t.Errorf("explain placement %+v, want node/%s holding the dataset", ex.Placement, node)
	}
	if table := s.gpufleet("explain", third); !strings.Contains(table, "PLACED") || !strings.Contains(table, "data-local score 100") {
		t.Errorf("explain does not show the data-local placement:\n%s", table)
	}
	for n, a := range agents {
		if s.nodeID(n) == node {
			if got := fetches(a.out.String()); got != "false true" {
				t.Errorf("%s: cache hits %q, want a download then a hit", n, got)
			}
		}
	}
	if got := fetches(empty.out.String()); got != "" {
		t.Errorf("the node without the data fetched it (%q)", got)
	}

	// 3. Faults: each a clear error naming the field, the source or the
	// object; nothing half-written is used.
	if out, err := s.gpufleetErr("run", "--gpus", "0", "--data", "storage:nope/x:data", "--", "true"); err == nil || !strings.Contains(out, "spec.data[0].source") || !strings.Contains(out, `declares no storage "nope"`) {
		t.Errorf("a storage the project does not declare: %v\n%s", err, out)
	}
	if out, err := s.gpufleetErr("run", "--gpus", "0", "--data", "s3://lake/x:/abs", "--", "true"); err == nil || !strings.Contains(out, "spec.data[0].path") {
		t.Errorf("an absolute path: %v\n%s", err, out)
	}
	rawObj := filepath.Join(raw, "corrupt", "x.bin")
	if err := os.WriteFile(rawObj, []byte("tampered bytes"), 0o644); err != nil { // same size, other bytes
		t.Fatal(err)
	}
	for src, wants := range map[string][]string{
		"storage:badkey/imagenet": {"spec.data[0].source storage:badkey/imagenet", "access denied"},
		"storage:nobucket/x":      {"spec.data[0].source storage:nobucket/x", "bucket does not exist"},
		"storage:lake/corrupt":    {"spec.data[0].source storage:lake/corrupt", `"x.bin"`, "does not match its listing"},
		"storage:lake/no-such":    {"spec.data[0].source storage:lake/no-such", "no objects under the source"},
	} {
		id := strings.TrimSpace(s.gpufleet("run", "--gpus", "0", "--data", src+":data", "--", "true"))
		v := s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
		reason := v.AttemptDetails[0].Reason
		if v.State != model.JobFailed {
			t.Errorf("%s: job %s, want failed (%s)", src, v.State, reason)
		}
		for _, w := range wants {
			if !strings.Contains(reason, w) {
				t.Errorf("%s: attempt reason %q lacks %q", src, reason, w)
			}
		}
	}
	id := strings.TrimSpace(s.gpufleet("run", "--gpus", "0", "--data", "storage:unreachable/x:data", "--", "true"))
	v := s.waitJob(id, func(v api.JobView) bool { return len(v.AttemptDetails) > 0 && v.AttemptDetails[0].State.Terminal() }, "first attempt ended")
	if a := v.AttemptDetails[0]; a.State != model.AttemptLost || !strings.Contains(a.Reason, "storage:unreachable/x") || !strings.Contains(a.Reason, "unreachable") {
		t.Errorf("unreachable storage: attempt %s (%s), want lost (retried) naming the source", a.State, a.Reason)
	}
	// Lost attempts are retried until the job's retries run out; it may
	// have ended by now.
	_, _ = s.gpufleetErr("jobs", "cancel", id)
	// No download half made: every node's cache holds whole entries only.
	for n, a := range map[string]*remoteAgent{"node-a": agents["node-a"], "node-b": agents["node-b"], "node-0": empty} {
		if tmp, _ := os.ReadDir(filepath.Join(a.cacheDir, "tmp")); len(tmp) != 0 {
			t.Errorf("%s's cache holds partial downloads: %v", n, tmp)
		}
	}
}

// startDataAgent starts an agent whose data cache is in a folder its
// workload users can pass through.
func startDataAgent(t *testing.T, s *serverProc, node, gpus string) *remoteAgent {
	t.Helper()
	var created api.TokenCreated
	if err := json.Unmarshal([]byte(s.gpufleet("tokens", "create", node, "--kind", "agent", "--ttl", "1h", "-o", "json")), &created); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(sharedDir(t), "cache")
	a := &remoteAgent{
		t: t, node: node, dataDir: t.TempDir(), cacheDir: cache,
		args: []string{"--server", "http://" + s.listen, "--fake-gpus", gpus, "--name", node, "--data-cache-dir", cache, "--data-cache-size", "1Gi"},
		env:  append(cleanEnv(), "GPUFLEET_TOKEN="+created.Secret),
	}
	a.start()
	return a
}

var fetchRE = regexp.MustCompile(`dataset ready.*?cache_hit.(true|false)`)

// fetches lists an agent log's dataset fetches as cache hits ("false true").
func fetches(log string) string {
	var out []string
	for _, m := range fetchRE.FindAllStringSubmatch(log, -1) {
		out = append(out, m[1])
	}
	return strings.Join(out, " ")
}

// nodeID is the id of the node registered under name.
func (s *serverProc) nodeID(name string) string {
	s.t.Helper()
	for _, n := range decodeItems[model.NodeInfo](s.t, s.gpufleet("nodes", "list", "-o", "json")) {
		if n.Name == name {
			return n.ID
		}
	}
	s.t.Fatalf("no node named %s", name)
	return ""
}
