package artifacts_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/artifacts"
	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/objstore"
	"github.com/gpufleet/gpufleet/internal/s3test"
)

// storeCheckpoint writes one checkpoint of job as a node does (objects,
// the history manifest, then latest), with files files of 4 KiB.
func storeCheckpoint(ctx context.Context, st objstore.Store, sl *objstore.Sealer, job string, step int64, files int) error {
	prefix := ckptsync.JobPrefix(sl, job)
	m := ckptsync.Manifest{Version: 1, JobID: job, Step: step, Time: time.Now().UTC(), Uploaded: time.Now().UTC()}
	for i := range files {
		b := make([]byte, 4096)
		rand.Read(b)
		sum := sha256.Sum256(b)
		f := ckptsync.File{Path: fmt.Sprintf("shard-%02d.pt", i), Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:]), Object: sl.Name(sum[:]), Mode: 0o644}
		key := ckptsync.ObjectKey(prefix, f.Object)
		if _, err := st.Put(ctx, key, sl.Seal(bytes.NewReader(b), key), objstore.SealedSize(f.Size)); err != nil {
			return err
		}
		m.Files = append(m.Files, f)
	}
	data, _ := json.Marshal(m)
	for _, key := range []string{ckptsync.HistoryKey(prefix, sl, data), ckptsync.LatestKey(prefix)} {
		if _, err := st.Put(ctx, key, sl.Seal(bytes.NewReader(data), key), objstore.SealedSize(int64(len(data)))); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkRetentionRound measures one retention round, in requests over
// HTTP to versitygw and wall time, on a project whose storage holds about
// objects keys: objects/10 ended jobs, each with one checkpoint of 8
// files (8 objects, its manifest, latest), and 4 running jobs, one of
// which checkpoints before each round. The rounds that read everything
// once (the first, and the collection walk's pages) run before the timer.
func BenchmarkRetentionRound(b *testing.B) {
	for _, objects := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("objects=%d", objects), func(b *testing.B) {
			ctx := context.Background()
			srv := s3test.Start(b)
			srv.CreateBucket(b, "art")
			storage := model.Storage{S3: &model.S3Storage{Bucket: "art", Prefix: "fleet", Endpoint: srv.Endpoint, PathStyle: true, CredentialsRef: "ops/S3"}}
			f := &fleet{
				pools:    []*model.NodePool{{Name: "spot", Spec: model.NodePoolSpec{CheckpointStorage: &storage}}},
				projects: []*model.Project{{Name: "vision", Spec: model.ProjectSpec{Artifacts: &model.ArtifactPolicy{KeepCheckpoints: 3}}}},
				jobs:     map[string]*model.Job{},
				secrets:  map[string]string{"ops/S3": s3test.AccessKey + ":" + s3test.SecretKey},
			}
			st, err := objstore.Open(ctx, storage, objstore.Credentials{AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey})
			if err != nil {
				b.Fatal(err)
			}
			key, _ := f.DataKey("vision")
			sl, _ := objstore.NewSealer(key)
			jobs := objects / 10
			for i := range jobs {
				id := fmt.Sprintf("j-%05d", i)
				f.jobs[id] = &model.Job{ID: id, Project: "vision", State: model.JobSucceeded}
			}
			for i := range 4 {
				id := fmt.Sprintf("j-run-%d", i)
				f.jobs[id] = &model.Job{ID: id, Project: "vision", State: model.JobRunning}
			}
			work := make(chan int)
			var wg sync.WaitGroup
			errc := make(chan error, 16)
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range work {
						if err := storeCheckpoint(ctx, st, sl, fmt.Sprintf("j-%05d", i), 100, 8); err != nil {
							errc <- err
							return
						}
					}
				}()
			}
			for i := range jobs {
				work <- i
			}
			close(work)
			wg.Wait()
			close(errc)
			for err := range errc {
				b.Fatal(err)
			}
			cnt := &counter{n: map[string]int{}}
			cfg := artifacts.Config{Fleet: f, Keys: f, Clock: clock.NewFake(time.Now())}
			counting(cnt)(&cfg)
			cat, err := artifacts.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			// Warm: the first round and the walk's pages (1,000 keys each).
			for r := 0; r < objects/1000+3; r++ {
				start := time.Now()
				if _, err := cat.Retain(ctx); err != nil {
					b.Fatal(err)
				}
				b.Logf("warm round %d: %v in %v", r, cnt.take(), time.Since(start).Round(time.Millisecond))
			}
			var wall time.Duration
			total := map[string]int{}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if err := storeCheckpoint(ctx, st, sl, "j-run-0", int64(200+i), 8); err != nil {
					b.Fatal(err)
				}
				cnt.take()
				b.StartTimer()
				start := time.Now()
				if _, err := cat.Retain(ctx); err != nil {
					b.Fatal(err)
				}
				wall += time.Since(start)
				for k, v := range cnt.take() {
					total[k] += v
				}
			}
			for _, op := range []string{"LIST", "HEAD", "GET", "DELETE"} {
				b.ReportMetric(float64(total[op])/float64(b.N), op+"/round")
			}
			b.ReportMetric(float64(wall.Milliseconds())/float64(b.N), "ms/round")
		})
	}
}
