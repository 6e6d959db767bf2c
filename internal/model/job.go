package model

import (
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
)

// JobState is where a job is in its life. Terminal states never change.
type JobState string

// Job states, in lifecycle order.
const (
	JobQueued       JobState = "queued"
	JobAdmitted     JobState = "admitted"
	JobProvisioning JobState = "provisioning"
	JobRunning      JobState = "running"
	JobSucceeded    JobState = "succeeded"
	JobFailed       JobState = "failed"
	JobCancelled    JobState = "cancelled"
	JobStoppedEarly JobState = "stopped-early"
)

// JobStates lists every job state, for metrics and validation.
var JobStates = []JobState{JobQueued, JobAdmitted, JobProvisioning, JobRunning, JobSucceeded, JobFailed, JobCancelled, JobStoppedEarly}

// Terminal reports whether s is a final state.
func (s JobState) Terminal() bool {
	switch s {
	case JobSucceeded, JobFailed, JobCancelled, JobStoppedEarly:
		return true
	}
	return false
}

// SpotPolicy says whether a job may run on interruptible capacity.
type SpotPolicy string

// Spot policies.
const (
	SpotNever    SpotPolicy = "never"
	SpotAllowed  SpotPolicy = "allowed"
	SpotRequired SpotPolicy = "required"
)

// Job is a unit of work as the controller keeps it: the user's spec plus
// status. Treat a published *Job as immutable; see the package doc.
type Job struct {
	ID      string            `json:"id"`
	Name    string            `json:"name,omitempty"`
	Project string            `json:"project"`
	User    string            `json:"user,omitempty"`
	Tags    map[string]string `json:"tags,omitempty"`
	Spec    JobSpec           `json:"spec"`

	State    JobState `json:"state"`
	Reason   string   `json:"reason,omitempty"`
	ExitCode *int     `json:"exitCode,omitempty"`
	// Attempts counts attempts started so far; the current one is Attempts.
	Attempts    int `json:"attempts"`
	Failures    int `json:"failures"`
	Preemptions int `json:"preemptions"`
	// Refusals counts attempts refused by a fence before anything ran
	// (Replica.NeverStarted): requeued without counting against
	// retries.preemptions, after a short back-off, up to MaxRefusals.
	Refusals int `json:"refusals,omitempty"`

	SubmittedAt time.Time `json:"submittedAt"`
	// EnqueuedAt is when the job last entered the queue: at submission, or
	// when a preempted or failed attempt requeued it.
	EnqueuedAt time.Time  `json:"enqueuedAt"`
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`

	// LastCheckpoint is when the job last reported a complete checkpoint;
	// work lost by preempting it is measured from here (or from its
	// attempt's start, whichever is later).
	LastCheckpoint *time.Time `json:"lastCheckpoint,omitempty"`
	// RetryAt, on a queued job whose last attempt failed, is when it may be
	// placed again (crash-loop back-off, FailureBackoff); nil otherwise. It
	// is kept in the store, so a restart does not cut a back-off short.
	RetryAt *time.Time `json:"retryAt,omitempty"`
	// ArrayID and ArrayIndex mark one task of an array job: the tasks share
	// ArrayID (the id the submission returned) and run with
	// GPUFLEET_ARRAY_INDEX=ArrayIndex.
	ArrayID    string `json:"arrayId,omitempty"`
	ArrayIndex int    `json:"arrayIndex,omitempty"`

	// Trusted is set when an admin submitted the job: only such jobs run on
	// nodes that do not isolate workloads (Node.NotIsolated).
	Trusted bool `json:"trusted,omitempty"`

	// NotifiedStuck records the Notification documents whose stuck-queued
	// event already fired for this job, each as "NAME@ENQUEUEDAT"
	// (notifications.StuckKey), so it fires once per time the job enters
	// the queue, across restarts.
	NotifiedStuck []string `json:"notifiedStuck,omitempty"`

	// Seq orders jobs by acceptance; it never repeats.
	Seq uint64 `json:"seq"`
	// Version increases with every committed change.
	Version uint64 `json:"version"`
}

// Clone returns a copy that can be changed without touching j.
func (j *Job) Clone() *Job {
	c := *j
	if j.ExitCode != nil {
		v := *j.ExitCode
		c.ExitCode = &v
	}
	if j.LastCheckpoint != nil {
		t := *j.LastCheckpoint
		c.LastCheckpoint = &t
	}
	if j.RetryAt != nil {
		t := *j.RetryAt
		c.RetryAt = &t
	}
	c.NotifiedStuck = slices.Clone(j.NotifiedStuck)
	return &c
}

// TotalGPUs is replicas × per-replica GPUs.
func (j *Job) TotalGPUs() float64 { return float64(j.Spec.Replicas) * j.Spec.Resources.GPUs }

// JobSpec is what a user asks for (DESIGN.md §2).
type JobSpec struct {
	Queue           string       `json:"queue,omitempty"`
	Priority        string       `json:"priority,omitempty"`
	Replicas        int          `json:"replicas,omitempty"`
	Resources       Resources    `json:"resources"`
	Run             RunSpec      `json:"run"`
	Spot            SpotPolicy   `json:"spot,omitempty"`
	MaxPricePerHour float64      `json:"maxPricePerHour,omitempty"`
	Regions         RegionPolicy `json:"regions,omitempty"`
	Checkpoint      Checkpoint   `json:"checkpoint,omitempty"`
	Retries         RetryPolicy  `json:"retries,omitempty"`
	Limits          Limits       `json:"limits,omitempty"`
	Estimate        Estimate     `json:"estimate,omitempty"`
	EarlyStop       *EarlyStop   `json:"earlyStop,omitempty"`
	// After lists jobs this one waits for.
	After []Dependency `json:"after,omitempty"`
	// Array, when > 0, makes the submission Array indexed tasks that are
	// scheduled as independent jobs under one id: task i is the job
	// "<array id>-<i>" and runs with GPUFLEET_ARRAY_INDEX=i, from 0. Each
	// task keeps the field, as the size of its array.
	Array int `json:"array,omitempty"`
	// NodeSelector requires node labels to equal these values.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Data are datasets the job reads, downloaded to each of its nodes
	// before it starts (docs/datasets.md).
	Data []DataSource `json:"data,omitempty"`
}

// Resources are per replica.
type Resources struct {
	// GPUs per replica: a whole number, or a fraction of one GPU below 1.
	GPUs   float64    `json:"gpus"`
	GPU    GPURequest `json:"gpu,omitempty"`
	CPU    float64    `json:"cpu,omitempty"`
	Memory Bytes      `json:"memory,omitempty"`
}

// GPURequest constrains which GPUs qualify.
type GPURequest struct {
	// Models allowed, in order of preference; empty means any.
	Models       []string `json:"models,omitempty"`
	MinMemory    Bytes    `json:"minMemory,omitempty"`
	Interconnect string   `json:"interconnect,omitempty"`
}

// RunSpec is the workload.
type RunSpec struct {
	Command []string `json:"command"`
	Image   string   `json:"image,omitempty"`
	// CUDA is the CUDA version the image was built for ("12.4"): nodes
	// whose NVIDIA driver cannot run it are not chosen. `gpufleet run
	// --image` fills it from the image's label where the image is local.
	CUDA    string            `json:"cuda,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Archive is the content address ("sha256:<hex>") of an uploaded
	// working directory (POST /v1/archives). Each node unpacks it before the
	// attempt starts and runs the command there; Workdir, if set, is then a
	// folder inside it.
	Archive string `json:"archive,omitempty"`
	// Secrets names secrets of the job's project (gpufleet secrets set)
	// that its replicas get as environment variables of the same name. The
	// value is opened only when the replica is handed to its node; it is
	// never stored in the job.
	Secrets []string `json:"secrets,omitempty"`
}

// cudaVersionRE is a CUDA version: MAJOR.MINOR[.PATCH].
var cudaVersionRE = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{1,4})?$`)

// archiveDigestRE is a content address of an uploaded archive.
var archiveDigestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// RegionPolicy is a data-residency constraint: shell-style patterns.
type RegionPolicy struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Checkpoint says how a job is asked to save its state before it is stopped.
type Checkpoint struct {
	Interval Duration `json:"interval,omitempty"`
	Signal   string   `json:"signal,omitempty"`
	Grace    Duration `json:"grace,omitempty"`
	// Restart is how long the job takes to resume after an interruption
	// (a new node, its checkpoint restored), for the deadline rule on spot
	// (README: "Deadlines weigh risk"). 0: its pool's restartTime, else 5m.
	Restart Duration `json:"restart,omitempty"`
}

// RetryPolicy bounds automatic requeues.
type RetryPolicy struct {
	// Failures is how many failed attempts are retried (default 0).
	Failures int `json:"failures,omitempty"`
	// Preemptions is how many involuntary interruptions (preempted or lost
	// attempts) are retried; 0 means the default, DefaultPreemptionRetries.
	Preemptions              int `json:"preemptions,omitempty"`
	OnDemandAfterPreemptions int `json:"onDemandAfterPreemptions,omitempty"`
}

// Crash-loop back-off: a failed attempt that retries.failures requeues
// waits FailureBackoff before the job may be placed again, so a job that
// fails at once does not take its GPUs, its node's launch path and the
// scheduler's attention in a tight loop. Preempted and lost attempts are
// not the job's fault and requeue without it.
const (
	FailureBackoffBase = 10 * time.Second
	FailureBackoffMax  = 5 * time.Minute
)

// FailureBackoff is the wait after a job's failures-th failed attempt:
// FailureBackoffBase × 2^(failures-1), at most FailureBackoffMax (10s,
// 20s, 40s, … 5m), the shape of the kubelet's restart back-off.
func FailureBackoff(failures int) time.Duration {
	if failures <= 0 {
		return 0
	}
	d := FailureBackoffBase
	for i := 1; i < failures && d < FailureBackoffMax; i++ {
		d *= 2
	}
	return min(d, FailureBackoffMax)
}

// Backoff reports whether j waits out a crash-loop back-off at now, and
// until when.
func (j *Job) Backoff(now time.Time) (time.Time, bool) {
	if j.RetryAt == nil || !now.Before(*j.RetryAt) {
		return time.Time{}, false
	}
	return *j.RetryAt, true
}

// Limits bound a job's run.
type Limits struct {
	Runtime  Duration   `json:"runtime,omitempty"`
	Deadline *time.Time `json:"deadline,omitempty"`
}

// Estimate is the user's guess, used for backfill and cost to finish.
type Estimate struct {
	Runtime Duration `json:"runtime,omitempty"`
}

// EarlyStop stops runs whose metric stopped improving.
type EarlyStop struct {
	Policy   string  `json:"policy"`
	Metric   string  `json:"metric"`
	Patience int     `json:"patience,omitempty"`
	MinDelta float64 `json:"minDelta,omitempty"`
	Mode     string  `json:"mode,omitempty"`
}

// Defaults used when a spec leaves a field empty.
const (
	DefaultQueue    = "default"
	DefaultPriority = "normal"
	DefaultProject  = "default"
	DefaultSignal   = "SIGTERM"
	DefaultGrace    = Duration(30 * time.Second)
	// DefaultPreemptionRetries: an interruption is not the job's fault, so
	// jobs survive a few by default.
	DefaultPreemptionRetries = 10
)

// Signals a job may name for its checkpoint signal.
var Signals = []string{"SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP", "SIGQUIT"}

// Default fills empty fields with their defaults. It is idempotent.
func (s *JobSpec) Default() {
	if s.Queue == "" {
		s.Queue = DefaultQueue
	}
	if s.Priority == "" {
		s.Priority = DefaultPriority
	}
	if s.Replicas == 0 {
		s.Replicas = 1
	}
	if s.Spot == "" {
		s.Spot = SpotNever
	}
	if s.Checkpoint.Signal == "" {
		s.Checkpoint.Signal = DefaultSignal
	}
	if s.Checkpoint.Grace == 0 {
		s.Checkpoint.Grace = DefaultGrace
	}
	if s.Retries.Preemptions == 0 {
		s.Retries.Preemptions = DefaultPreemptionRetries
	}
	s.defaultData()
}

// MaxCPU bounds resources.cpu: more CPUs than any machine has (the largest
// cloud shapes have under 1,000 vCPUs), so an absurd request such as 1e308
// is refused at submission instead of waiting forever.
const MaxCPU = 4096

// Validate reports every problem in s, with paths under prefix (usually
// "spec"). knownGPU says whether a GPU model name exists in the catalog; nil
// accepts any name.
func (s *JobSpec) Validate(prefix string, knownGPU func(string) bool) FieldErrors {
	var fe FieldErrors
	p := func(f string) string { return prefix + "." + f }
	if s.Queue != "" && !ValidName(s.Queue) {
		fe.Add(p("queue"), "must be a queue name: lower-case letters, digits and dashes (at most 63)")
	}
	if s.Replicas < 0 {
		fe.Add(p("replicas"), "must be ≥ 1")
	}
	if v := s.Run.CUDA; v != "" {
		if !cudaVersionRE.MatchString(v) {
			fe.Add(p("run.cuda"), fmt.Sprintf("%q is not a CUDA version such as 12.4", v))
		} else if s.Run.Image == "" {
			fe.Add(p("run.cuda"), "names the CUDA version of an image: set run.image too, or leave it out")
		}
	}
	if s.Replicas > 4096 {
		fe.Add(p("replicas"), "must be ≤ 4096")
	}
	g := s.Resources.GPUs
	switch {
	case math.IsNaN(g) || g < 0:
		fe.Add(p("resources.gpus"), "must be ≥ 0")
	case g > 1 && g != math.Trunc(g):
		fe.Add(p("resources.gpus"), "must be a whole number, or a fraction below 1 for a shared GPU")
	case g > 1024:
		fe.Add(p("resources.gpus"), "must be ≤ 1024")
	}
	switch c := s.Resources.CPU; {
	case c < 0 || math.IsNaN(c):
		fe.Add(p("resources.cpu"), "must be ≥ 0")
	case c > MaxCPU:
		fe.Add(p("resources.cpu"), fmt.Sprintf("must be ≤ %d (CPUs per replica)", MaxCPU))
	}
	if s.Resources.Memory < 0 {
		fe.Add(p("resources.memory"), "must be ≥ 0")
	}
	if s.Resources.GPU.MinMemory < 0 {
		fe.Add(p("resources.gpu.minMemory"), "must be ≥ 0")
	}
	for i, m := range s.Resources.GPU.Models {
		if m == "" {
			fe.Add(fmt.Sprintf("%s[%d]", p("resources.gpu.models"), i), "must not be empty")
		} else if knownGPU != nil && !knownGPU(m) {
			fe.Add(fmt.Sprintf("%s[%d]", p("resources.gpu.models"), i), fmt.Sprintf("unknown GPU model %q (see `gpufleet offers` for the catalog's models)", m))
		}
	}
	switch s.Resources.GPU.Interconnect {
	case "", "nvlink", "nvswitch", "pcie", "any":
	default:
		fe.Add(p("resources.gpu.interconnect"), "must be one of nvlink, nvswitch, pcie, any")
	}
	if g == 0 && (len(s.Resources.GPU.Models) > 0 || s.Resources.GPU.MinMemory > 0) {
		fe.Add(p("resources.gpu"), "GPU constraints need resources.gpus > 0")
	}
	if len(s.Run.Command) == 0 {
		fe.Add(p("run.command"), "must not be empty: give the program to run and its arguments")
	} else if strings.TrimSpace(s.Run.Command[0]) == "" {
		fe.Add(p("run.command[0]"), "must name a program")
	}
	if s.Run.Archive != "" {
		if !archiveDigestRE.MatchString(s.Run.Archive) {
			fe.Add(p("run.archive"), "must be sha256: and 64 lower-case hex digits, as POST /v1/archives returns")
		}
		if w := s.Run.Workdir; w != "" && (path.IsAbs(w) || w != path.Clean(w) || w == ".." || strings.HasPrefix(w, "../")) {
			fe.Add(p("run.workdir"), "with run.archive, must be a clean relative path inside the archive")
		}
	}
	if w := s.Run.Workdir; w != "" && s.Run.Archive == "" {
		switch {
		case strings.ContainsRune(w, 0):
			fe.Add(p("run.workdir"), "must not hold a NUL byte")
		case w != path.Clean(w):
			fe.Add(p("run.workdir"), fmt.Sprintf("must be a clean path (%s)", path.Clean(w)))
		case !path.IsAbs(w) && (w == ".." || strings.HasPrefix(w, "../")):
			fe.Add(p("run.workdir"), "must not leave the job's own folder")
		}
	}
	seen := map[string]bool{}
	for i, name := range s.Run.Secrets {
		f := fmt.Sprintf("%s[%d]", p("run.secrets"), i)
		if msg := ValidateSecretName(name); msg != "" {
			fe.Add(f, msg)
		} else if seen[name] {
			fe.Add(f, fmt.Sprintf("%q is named twice", name))
		} else if _, ok := s.Run.Env[name]; ok {
			fe.Add(f, fmt.Sprintf("%q is also in run.env", name))
		}
		seen[name] = true
	}
	for k := range s.Run.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			fe.Add(p("run.env"), fmt.Sprintf("invalid variable name %q", k))
		} else if strings.HasPrefix(k, "GPUFLEET_") || k == "CUDA_VISIBLE_DEVICES" {
			fe.Add(p("run.env."+k), "is set by gpufleet and cannot be overridden")
		}
	}
	switch s.Spot {
	case "", SpotNever, SpotAllowed, SpotRequired:
	default:
		fe.Add(p("spot"), "must be one of never, allowed, required")
	}
	if s.MaxPricePerHour < 0 || math.IsNaN(s.MaxPricePerHour) {
		fe.Add(p("maxPricePerHour"), "must be ≥ 0")
	}
	s.validateData(p("data"), &fe)
	if s.Checkpoint.Signal != "" && !contains(Signals, s.Checkpoint.Signal) {
		fe.Add(p("checkpoint.signal"), "must be one of "+strings.Join(Signals, ", "))
	}
	if s.Checkpoint.Grace < 0 {
		fe.Add(p("checkpoint.grace"), "must be ≥ 0")
	}
	if s.Checkpoint.Interval < 0 {
		fe.Add(p("checkpoint.interval"), "must be ≥ 0")
	}
	if s.Checkpoint.Restart < 0 || s.Checkpoint.Restart > Duration(maxRestart) {
		fe.Add(p("checkpoint.restart"), "must be between 0 (the pool's restart time, else 5m) and 24h")
	}
	if s.Retries.Failures < 0 {
		fe.Add(p("retries.failures"), "must be ≥ 0")
	}
	if s.Retries.Preemptions < 0 {
		fe.Add(p("retries.preemptions"), "must be ≥ 0")
	}
	if s.Retries.OnDemandAfterPreemptions < 0 {
		fe.Add(p("retries.onDemandAfterPreemptions"), "must be ≥ 0")
	}
	if s.Limits.Runtime < 0 {
		fe.Add(p("limits.runtime"), "must be ≥ 0")
	}
	if s.Estimate.Runtime < 0 {
		fe.Add(p("estimate.runtime"), "must be ≥ 0")
	}
	for i, r := range s.Regions.Allow {
		if r == "" {
			fe.Add(fmt.Sprintf("%s[%d]", p("regions.allow"), i), "must not be empty")
		}
	}
	if s.Priority != "" {
		// Declared classes are the server's to know (see
		// ResolvePriorityClass); here only the form is checked.
		if _, ok := LookupPriorityClass(s.Priority); !ok && !nameRE.MatchString(s.Priority) {
			fe.Add(p("priority"), "must be a priority class: one of "+strings.Join(PriorityClassNames(nil), ", ")+", or one the fleet declares (kind: PriorityClass)")
		}
	}
	for i, d := range s.After {
		path := fmt.Sprintf("%s[%d]", p("after"), i)
		if strings.TrimSpace(d.Job) == "" {
			fe.Add(path+".job", "must name a job id")
		}
		switch d.On {
		case "", AfterOK, AfterAny:
		default:
			fe.Add(path+".on", "must be ok or any")
		}
	}
	if s.Array < 0 || s.Array > 10000 {
		fe.Add(p("array"), "must be between 1 and 10000 tasks (omit it for a single job)")
	}
	for k := range s.NodeSelector {
		if k == "" {
			fe.Add(p("nodeSelector"), "label keys must not be empty")
		}
	}
	if es := s.EarlyStop; es != nil {
		switch es.Policy {
		case "median", "plateau", "threshold", "nan":
		default:
			fe.Add(p("earlyStop.policy"), "must be one of median, plateau, threshold, nan")
		}
		if es.Metric == "" {
			fe.Add(p("earlyStop.metric"), "must name the metric to watch")
		}
		switch es.Mode {
		case "", "alert", "stop":
		default:
			fe.Add(p("earlyStop.mode"), "must be alert or stop")
		}
	}
	return fe
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// HostPaths lists the fields of s that reach outside the job's own tree on
// the node: an absolute run.workdir (without run.archive) runs the job in a
// folder of the host's. Only admins may submit such specs (issue 9); the
// spec has no field for privileged containers, host mounts or the host
// network, and strict decoding refuses unknown ones.
func (s *JobSpec) HostPaths(prefix string) FieldErrors {
	var fe FieldErrors
	// In a container (run.image) an absolute workdir is the image's own.
	if w := s.Run.Workdir; s.Run.Archive == "" && s.Run.Image == "" && path.IsAbs(w) {
		fe.Add(prefix+".run.workdir", fmt.Sprintf("%s is a host path: only admins may run jobs in one; upload the working directory instead (gpufleet run --upload-workdir)", w))
	}
	return fe
}

// MaxRefusals is how many fence-refused attempts (Job.Refusals) a job is
// requeued for free: twice its preemption retries. Past it, a refusal
// counts as an ordinary interruption, so a node that keeps refusing (its
// launches always reach the supervisor after its fence passed, or an agent
// that always reports NeverStarted) cannot loop a job forever.
func (j *Job) MaxRefusals() int { return 2 * j.Spec.Retries.Preemptions }

// RefusalBackoff is how long a job waits before its next placement after
// its n-th fence-refused attempt: 2 s a refusal, at most 30 s.
func RefusalBackoff(n int) time.Duration {
	return min(time.Duration(n)*2*time.Second, 30*time.Second)
}
