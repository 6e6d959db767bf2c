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
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

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
	// The same bytes through the SDK's multipart calls with the upload's
	// part size and concurrency: what the storage's multipart path costs
	// without gpufleet's hashing and sealing.
	b.Run(fmt.Sprintf("sdk-multipart-%dMiB", mb), func(b *testing.B) {
		b.SetBytes(size)
		for i := range b.N {
			sdkMultipart(ctx, b, client, filepath.Join(src, "model.pt"), fmt.Sprintf("plain-mp/%d", i), size)
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

// sdkMultipart uploads the file at path as key with the SDK's multipart
// calls: objstore.DefaultPartSize parts, 4 at a time (objstore's default).
func sdkMultipart(ctx context.Context, b *testing.B, client *s3.Client, path, key string, size int64) {
	mp, err := client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("ckpt"), Key: aws.String(key)})
	if err != nil {
		b.Fatal(err)
	}
	const part = objstore.DefaultPartSize
	n := int((size + part - 1) / part)
	parts := make([]types.CompletedPart, n)
	sem := make(chan struct{}, 4)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs <- func() error {
				f, err := os.Open(path)
				if err != nil {
					return err
				}
				defer f.Close()
				off := int64(i) * part
				length := min(part, size-off)
				out, err := client.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("ckpt"), Key: aws.String(key), UploadId: mp.UploadId,
					PartNumber: aws.Int32(int32(i + 1)), Body: io.NewSectionReader(f, off, length), ContentLength: aws.Int64(length)})
				if err != nil {
					return err
				}
				parts[i] = types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(int32(i + 1))}
				return nil
			}()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	if _, err := client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("ckpt"), Key: aws.String(key), UploadId: mp.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		b.Fatal(err)
	}
}
