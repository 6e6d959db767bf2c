package ckptsync_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/objstore"
	"github.com/gpufleet/gpufleet/internal/podsync"
	"github.com/gpufleet/gpufleet/internal/s3test"
)

// BenchmarkCheckpoint moves one checkpoint file of GPUFLEET_BENCH_MB MiB
// (default 64) through versitygw on loopback: the plain SDK PutObject and
// GetObject of the same file, against Syncer.Upload (hash, seal,
// multipart) and Syncer.Restore (download, open, verify, move in place).
// resume is the whole added time to resume as a node pays it before the
// job starts: open the storage from what the control plane hands the node
// (agentapi.CheckpointSync), read latest, restore; through podsync.Restore,
// which a Kubernetes pod's restore container runs and which an agent's
// restore matches (ckptsync.Open, Restore) but for podsync's chmod pass.
// Run: go test -run '^$' -bench Checkpoint -benchtime 3x ./internal/ckptsync/
func BenchmarkCheckpoint(b *testing.B) {
	mb := 64
	if v, err := strconv.Atoi(os.Getenv("GPUFLEET_BENCH_MB")); err == nil && v > 0 {
		mb = v
	}
	size := int64(mb) << 20
	srv := s3test.Start(b)
	srv.CreateBucket(b, "ckpt")
	src := b.TempDir()
	f, err := os.Create(filepath.Join(src, "model.pt"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		b.Fatal(err)
	}
	f.Close()
	os.WriteFile(filepath.Join(src, ckptsync.Marker), []byte("step=1"), 0o600)
	client := srv.Client()
	ctx := context.Background()
	cfg := objstore.S3Config{Endpoint: srv.Endpoint, Region: s3test.Region, Bucket: "ckpt", PathStyle: true,
		AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey}
	st, err := objstore.NewS3(cfg)
	if err != nil {
		b.Fatal(err)
	}
	sl, _ := objstore.NewSealer(dataKey)
	newSyncer := func(job, dir string) *ckptsync.Syncer {
		s, err := ckptsync.New(ckptsync.Config{Store: st, Sealer: sl, JobID: job, Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}

	b.Run(fmt.Sprintf("sdk-put-%dMiB", mb), func(b *testing.B) {
		b.SetBytes(size)
		for i := range b.N {
			f, _ := os.Open(filepath.Join(src, "model.pt"))
			_, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("ckpt"), Key: aws.String(fmt.Sprintf("plain/%d", i)), Body: f, ContentLength: aws.Int64(size)})
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(fmt.Sprintf("upload-%dMiB", mb), func(b *testing.B) {
		b.SetBytes(size)
		for i := range b.N {
			// A job of its own each time: nothing is stored already.
			if _, ok, err := newSyncer(fmt.Sprintf("bench-%d", i), src).Upload(ctx); err != nil || !ok {
				b.Fatalf("upload: %v %v", ok, err)
			}
		}
	})
	b.Run(fmt.Sprintf("sdk-get-%dMiB", mb), func(b *testing.B) {
		b.SetBytes(size)
		for range b.N {
			out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("ckpt"), Key: aws.String("plain/0")})
			if err != nil {
				b.Fatal(err)
			}
			dst, _ := os.Create(filepath.Join(b.TempDir(), "model.pt"))
			if _, err := io.Copy(dst, out.Body); err != nil {
				b.Fatal(err)
			}
			out.Body.Close()
			dst.Close()
		}
	})
	b.Run(fmt.Sprintf("restore-%dMiB", mb), func(b *testing.B) {
		b.SetBytes(size)
		for range b.N {
			if m, ok, err := newSyncer("bench-0", b.TempDir()).Restore(ctx); err != nil || !ok || m.Bytes() != size+6 {
				b.Fatalf("restore: %v %v", ok, err)
			}
		}
	})
	ck := agentapi.CheckpointSync{Storage: model.Storage{S3: &model.S3Storage{Bucket: "ckpt", Endpoint: srv.Endpoint, Region: s3test.Region, PathStyle: true}},
		AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey, DataKey: dataKey}
	b.Run(fmt.Sprintf("resume-%dMiB", mb), func(b *testing.B) {
		b.SetBytes(size)
		for range b.N {
			dir := b.TempDir()
			if err := podsync.Restore(ctx, podsync.Spec{JobID: "bench-0", AttemptID: "a2", Attempt: 2, Checkpoint: &ck}, dir, slog.New(slog.DiscardHandler)); err != nil {
				b.Fatal(err)
			}
			if fi, err := os.Stat(filepath.Join(dir, "model.pt")); err != nil || fi.Size() != size {
				b.Fatalf("resumed model.pt: %v %v", fi, err)
			}
		}
	})
}
