package podsync_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/datacache"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/objstore"
	"github.com/gpufleet/gpufleet/internal/podsync"
	"github.com/gpufleet/gpufleet/internal/s3test"
)

var discard = slog.New(slog.DiscardHandler)

func TestFromEnv(t *testing.T) {
	t.Setenv(podsync.EnvSpec, "")
	if _, err := podsync.FromEnv(); err == nil || !strings.Contains(err.Error(), podsync.EnvSpec) {
		t.Errorf("unset: %v, want an error naming %s", err, podsync.EnvSpec)
	}
	t.Setenv(podsync.EnvSpec, "{not json")
	if _, err := podsync.FromEnv(); err == nil || !strings.Contains(err.Error(), podsync.EnvSpec) {
		t.Errorf("bad JSON: %v, want an error naming %s", err, podsync.EnvSpec)
	}
}

// TestFaultsAreNamed: what a pod's sync containers say (their message is
// the replica's end on Kubernetes) for wrong credentials, a missing
// bucket, unreachable storage and a corrupted object: the field, the
// source or storage, and the object.
func TestFaultsAreNamed(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "lake")
	srv.CreateBucket(t, "ckpt")
	ctx := context.Background()
	if _, err := srv.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("lake"), Key: aws.String("set/x.bin"), Body: strings.NewReader("original bytes")}); err != nil {
		t.Fatal(err)
	}
	storage := func(bucket, prefix string) model.Storage {
		return model.Storage{S3: &model.S3Storage{Bucket: bucket, Prefix: prefix, Endpoint: srv.Endpoint, Region: s3test.Region, PathStyle: true}}
	}
	data := func(st model.Storage, secret string) podsync.Spec {
		return podsync.Spec{JobID: "j", AttemptID: "a", Attempt: 1, Project: "nlp", Data: []agentapi.DataSync{{
			Field: "spec.data[0]", Source: "storage:lake/set", Path: "data", Digest: "d", Storage: st, AccessKeyID: s3test.AccessKey, SecretAccessKey: secret}}}
	}
	ckpt := func(st model.Storage, secret string) podsync.Spec {
		return podsync.Spec{JobID: "j", AttemptID: "a", Attempt: 1, Project: "nlp", Checkpoint: &agentapi.CheckpointSync{
			Storage: st, AccessKeyID: s3test.AccessKey, SecretAccessKey: secret, DataKey: bytes.Repeat([]byte{1}, 32)}}
	}
	dead := storage("lake", "set")
	dead.S3.Endpoint = "http://127.0.0.1:1"
	for name, tc := range map[string]struct {
		fetch   podsync.Spec
		restore podsync.Spec
		want    error
	}{
		"wrong credentials": {data(storage("lake", "set"), "wrong-secret"), ckpt(storage("ckpt", ""), "wrong-secret"), objstore.ErrAccessDenied},
		"missing bucket":    {data(storage("gone", "set"), s3test.SecretKey), ckpt(storage("gone", ""), s3test.SecretKey), objstore.ErrNoBucket},
		"unreachable":       {data(dead, s3test.SecretKey), ckpt(dead, s3test.SecretKey), objstore.ErrUnreachable},
	} {
		t.Run(name, func(t *testing.T) {
			err := podsync.FetchData(ctx, tc.fetch, t.TempDir(), discard)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "spec.data[0].source storage:lake/set") {
				t.Errorf("fetch-data: %v, want %v naming the field and source", err, tc.want)
			}
			err = podsync.Restore(ctx, tc.restore, t.TempDir(), discard)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "latest") {
				t.Errorf("restore: %v, want %v naming the object", err, tc.want)
			}
		})
	}

	// A corrupted object: the listing (size, ETag) and the bytes disagree.
	s := data(storage("lake", "set"), s3test.SecretKey)
	rawObj := filepath.Join(srv.Root, "lake", "set", "x.bin")
	if err := os.WriteFile(rawObj, []byte("tampered bytes"), 0o644); err != nil { // same size, other bytes
		t.Fatal(err)
	}
	err := podsync.FetchData(ctx, s, t.TempDir(), discard)
	if !errors.Is(err, datacache.ErrCorrupt) || !strings.Contains(err.Error(), `"x.bin"`) || !strings.Contains(err.Error(), "spec.data[0].source") {
		t.Errorf("corrupted object: %v, want ErrCorrupt naming the field and the object", err)
	}
}
