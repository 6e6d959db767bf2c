package storetest

import (
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// T0 is the fixtures' reference time; whole seconds in UTC so objects compare
// equal after a JSON round trip.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Job is the job from DESIGN.md §2 as the controller would store it.
func Job(id string, seq, version uint64) *model.Job {
	return &model.Job{
		ID:      id,
		Name:    "llama-ft",
		Project: "nlp",
		User:    "ada",
		Tags:    map[string]string{"team": "nlp", "experiment": "lr-sweep"},
		Spec: model.JobSpec{
			Queue:    "research",
			Priority: "normal",
			Replicas: 2,
			Resources: model.Resources{
				GPUs:   8,
				GPU:    model.GPURequest{Models: []string{"H100", "A100-80GB"}, MinMemory: 40 * model.GiB, Interconnect: "nvlink"},
				CPU:    32,
				Memory: 256 * model.GiB,
			},
			Run: model.RunSpec{
				Command: []string{"torchrun", "--nproc-per-node=8", "train.py", "--config", "configs/llama-8b.yaml"},
				Workdir: ".",
				Env:     map[string]string{"LR": "3e-4", "WANDB_PROJECT": "llama-ft", "HF_HOME": "/data/hf"},
			},
			Spot:            model.SpotAllowed,
			MaxPricePerHour: 40,
			Regions:         model.RegionPolicy{Allow: []string{"eu-*"}},
			Checkpoint:      model.Checkpoint{Interval: model.Duration(30 * time.Minute), Signal: "SIGTERM", Grace: model.Duration(2 * time.Minute)},
			Retries:         model.RetryPolicy{Failures: 2, Preemptions: 10, OnDemandAfterPreemptions: 3},
			Limits:          model.Limits{Runtime: model.Duration(12 * time.Hour)},
			Estimate:        model.Estimate{Runtime: model.Duration(6 * time.Hour)},
			EarlyStop:       &model.EarlyStop{Policy: "plateau", Metric: "val_loss", Patience: 3, MinDelta: 0.01, Mode: "stop"},
		},
		State:       model.JobQueued,
		SubmittedAt: T0,
		Seq:         seq,
		Version:     version,
	}
}

// Attempt is attempt n of job jobID, running on two nodes.
func Attempt(jobID string, n int, version uint64) *model.Attempt {
	started := T0.Add(time.Minute)
	return &model.Attempt{
		ID:     model.AttemptID(jobID, n),
		JobID:  jobID,
		Number: n,
		Replicas: []model.Replica{
			{Rank: 0, NodeID: "node-1", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}, State: model.AttemptRunning},
			{Rank: 1, NodeID: "node-2", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}, State: model.AttemptRunning},
		},
		State:     model.AttemptRunning,
		CreatedAt: T0,
		StartedAt: &started,
		Version:   version,
	}
}

// Node is an 8-GPU H100 node.
func Node(id string, version uint64) *model.Node {
	gpus := make([]model.GPU, 8)
	for i := range gpus {
		gpus[i] = model.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", id, i), Model: "H100", Memory: 80 * model.GiB, NVLinkGroup: 0}
	}
	return &model.Node{
		ID: id, Name: id, Provider: "sim", Pool: "h100-spot", State: model.NodeReady, GPUs: gpus,
		CPU: 208, Memory: 1800 * model.GiB, Labels: map[string]string{"zone": "eu-west-1a"},
		Region: "eu-west-1", Zone: "eu-west-1a", InstanceType: "p5.48xlarge", CapacityType: model.Spot,
		PricePerHour: 31.5, GPUSource: "fake", RegisteredAt: T0, LastHeartbeat: T0.Add(time.Minute), Version: version,
	}
}

// Token is a user token with a hash.
func Token(id string) *model.Token {
	h := sha256.Sum256([]byte("secret of " + id))
	return &model.Token{
		ID: id, Kind: model.TokenUser, Subject: "ada", Name: "laptop", Hash: h[:],
		CreatedAt: T0, ExpiresAt: T0.Add(30 * 24 * time.Hour),
	}
}

// Idempotency is a record mapping key to jobID.
func Idempotency(subject, key, jobID string, expires time.Time) store.Idempotency {
	h := sha256.Sum256([]byte("body of " + key))
	return store.Idempotency{Subject: subject, Key: key, JobID: jobID, BodyHash: h[:], Expires: expires}
}

// HoldFirstCommit returns a CommitObserver that blocks inside the first
// commit until release is closed, and records every group's size. A test
// submits one batch, waits on entered, submits the rest (which queue up
// behind the held commit), then closes release: the grouping that follows
// is deterministic. groups is safe to read once every batch's channel has
// yielded, since the observer runs before the channels are completed.
func HoldFirstCommit() (observe func(time.Duration, int), entered <-chan struct{}, release chan<- struct{}, groups *[]int) {
	in, rel := make(chan struct{}), make(chan struct{})
	var sizes []int
	observe = func(_ time.Duration, batches int) {
		sizes = append(sizes, batches)
		if len(sizes) == 1 {
			close(in)
			<-rel
		}
	}
	return observe, in, rel, &sizes
}
