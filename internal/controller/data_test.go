package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

const lakeProject = `apiVersion: gpufleet.dev/v1
kind: Project
metadata: {name: default}
spec:
  storage:
    lake:    {s3: {bucket: lake, prefix: shared, endpoint: "http://127.0.0.1:9", pathStyle: true, credentialsRef: default/S3_LAKE}}
    foreign: {s3: {bucket: lake, credentialsRef: other/S3_LAKE}}
    gone:    {s3: {bucket: lake, credentialsRef: default/S3_LAKE}}
`

func dataSpec(src string) model.JobSpec {
	spec := model.JobSpec{Resources: model.Resources{GPUs: 1}, Run: model.RunSpec{Command: []string{"true"}},
		Data: []model.DataSource{{Source: src, Path: "data/"}}}
	spec.Default()
	return spec
}

// TestDataSourcesResolveForTheNode: a job's storage: source reaches its
// node resolved (the dataset's prefix under the storage's, credentials
// opened from the sealed secret), a source naming a storage the project
// lacks is refused at submission with its field path, and a storage whose
// credentials belong to another project ends the attempt with the reason.
func TestDataSourcesResolveForTheNode(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, newMemStore(), clock.NewFake(t0), withKeyring(t))
	set, fe := manifest.Parse([]manifest.Source{{Name: "project.yaml", Data: []byte(lakeProject), Format: manifest.YAML}}, manifest.Checks{})
	if fe != nil {
		t.Fatal(fe)
	}
	if _, err := h.c.ApplyFleet(ctx, set, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Vault().PutSecret(ctx, "default", "S3_LAKE", []byte("AKID:s3cr3t")); err != nil {
		t.Fatal(err)
	}
	h.register("n1", 2)

	_, _, err := h.c.Submit(ctx, Submission{Project: "default", User: "test", Spec: dataSpec("storage:nope/x")})
	if err == nil || !strings.Contains(err.Error(), "spec.data[0].source") || !strings.Contains(err.Error(), `declares no storage "nope"`) {
		t.Fatalf("a storage the project lacks: %v", err)
	}
	_, _, err = h.c.Submit(ctx, Submission{Project: "default", User: "test", Spec: dataSpec("storage:foreign/x")})
	if err == nil || !strings.Contains(err.Error(), "spec.data[0].source") || !strings.Contains(err.Error(), "its own secrets") {
		t.Fatalf("a storage with another project's credentials: %v", err)
	}
	// s3:// is read with the node's own credentials: a tenant may not.
	_, _, err = h.c.Submit(ctx, Submission{Project: "default", User: "test", Spec: dataSpec("s3://someone-elses/bucket")})
	if err == nil || !strings.Contains(err.Error(), "spec.data[0].source") || !strings.Contains(err.Error(), "node's own credentials") {
		t.Fatalf("a tenant's s3:// source: %v", err)
	}
	if fe := admitData(nil, "default", dataSpecPtr("s3://lake/x"), true); fe != nil {
		t.Errorf("an admin's s3:// source refused: %v", fe)
	}

	j := h.submit(dataSpec("storage:lake/imagenet/"))
	rs := h.waitDesired(1).Replicas[0]
	loc, _ := model.ParseDataSource("storage:lake/imagenet")
	want := []agentapi.DataSync{{
		Field: "spec.data[0]", Source: "storage:lake/imagenet/", Path: "data", Digest: model.DataDigest("default", loc),
		Storage:     model.Storage{S3: &model.S3Storage{Bucket: "lake", Prefix: "shared/imagenet", Endpoint: "http://127.0.0.1:9", PathStyle: true, CredentialsRef: "default/S3_LAKE"}},
		AccessKeyID: "AKID", SecretAccessKey: "s3cr3t",
	}}
	if diff := cmp.Diff(want, rs.Data); diff != "" {
		t.Errorf("desired data (-want +got):\n%s", diff)
	}

	// Progress reported on the sync shows on the job until it starts.
	if _, err := h.c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", Fetching: []agentapi.DataProgress{{ReplicaID: rs.ID, Done: 3435973837, Total: 40 << 30}}}); err != nil {
		t.Fatal(err)
	}
	got, err := h.c.Job(j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Reason != "fetching data 3.2/40.0 GiB" {
		t.Errorf("job reason %q while fetching, want fetching data 3.2/40.0 GiB", got.Reason)
	}
	if list := h.c.Jobs(JobFilter{}); len(list) == 0 || list[0].Reason != got.Reason {
		t.Errorf("jobs list does not show the progress")
	}
	h.sync(running(rs.ID))
	if got, _ := h.c.Job(j.ID); got.Reason != "" {
		t.Errorf("job reason %q once the download ended, want none", got.Reason)
	}

	// The node's datasets reach the scheduler's snapshot.
	if _, err := h.c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", Datasets: []string{want[0].Digest}}); err != nil {
		t.Fatal(err)
	}
	h.c.mu.Lock()
	held := h.c.heldDataLocked()["n1"]
	h.c.mu.Unlock()
	if !held[want[0].Digest] {
		t.Errorf("the node's reported dataset is not in the scheduler's input: %v", held)
	}

	// A storage removed after submission: the attempt ends with the reason.
	j2 := h.submit(dataSpec("storage:gone/x"))
	without, fe := manifest.Parse([]manifest.Source{{Name: "project.yaml", Data: []byte(strings.Replace(lakeProject, "    gone:", "    #gone:", 1)), Format: manifest.YAML}}, manifest.Checks{})
	if fe != nil {
		t.Fatal(fe)
	}
	if _, err := h.c.ApplyFleet(ctx, without, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	for _, r := range h.waitDesired(2).Replicas {
		if strings.HasPrefix(r.ID, j2.ID) {
			if len(r.Data) != 1 || !strings.Contains(r.Data[0].Error, "spec.data[0].source storage:gone/x") || !strings.Contains(r.Data[0].Error, `declares no storage "gone"`) || r.Data[0].SecretAccessKey != "" {
				t.Errorf("a removed storage: %+v", r.Data)
			}
		}
	}
}

func dataSpecPtr(src string) *model.JobSpec {
	s := dataSpec(src)
	return &s
}

func TestFetchingReasonUnits(t *testing.T) {
	for _, tc := range []struct {
		done, total int64
		want        string
	}{
		{3435973837, 40 << 30, "fetching data 3.2/40.0 GiB"},
		{2 << 20, 12 << 20, "fetching data 2.0/12.0 MiB"},
		{512, 1 << 10, "fetching data 0.5/1.0 KiB"},
	} {
		if got := FetchingReason(tc.done, tc.total); got != tc.want {
			t.Errorf("FetchingReason(%d, %d) = %q, want %q", tc.done, tc.total, got, tc.want)
		}
	}
}
