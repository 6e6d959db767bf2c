package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// runFlags are the job fields `run` takes as flags.
type runFlags struct {
	file    string
	follow  bool
	data    []string
	out     string
	name    string
	project string
	// defaultProject is the context's, for a job that names none.
	defaultProject string
	queue          string
	priority       string
	replicas       int
	array          int
	gpus           float64
	gpuModels      []string
	minGPUMem      string
	cpu            float64
	memory         string
	spot           string
	env            []string
	secrets        []string
	tags           []string
	workdir        string
	image          string
	cuda           string
	upload         bool
	uploadMaxFile  string
	runtime        string
	grace          string
	signal         string
	retries        int
	idempotent     string
}

func newRunCmd(g *globals) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run [flags] [-- COMMAND [ARG...]]",
		Short: "Submit a job from a manifest or from flags",
		Long: `Submit a job and print its id. Give either a Job manifest (-f) or the job's
fields as flags with the command after '--'. With --follow, stream the job's
output until it ends and exit with its exit code.`,
		Example: `  gpufleet run --gpus 0 -- sh -c 'echo hello'
  gpufleet run --gpus 8 --gpu H100 --runtime 12h -- python train.py
  gpufleet run -f train.yaml --follow
  gpufleet run --gpus 1 --env LR=3e-4 --tag team=nlp -o json -- python sweep.py
  gpufleet run --image localhost/gpufleet-example/app:1 --gpus 1 -- /app/train.sh
  gpufleet run --gpus 1 --data storage:lake/imagenet:data/ -- sh -c 'ls $GPUFLEET_DATA_DIR/data'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(f.out); err != nil {
				return err
			}
			f.defaultProject = g.defaultProject()
			body, yamlBody, err := f.manifest(cmd, args)
			if err != nil {
				return err
			}
			if f.file != "" && f.defaultProject != "" {
				if body, err = withDefaultProject(body, f.defaultProject); err != nil {
					return err
				}
				yamlBody = false
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if f.upload {
				maxFile, err := model.ParseBytes(f.uploadMaxFile)
				if err != nil {
					return usageError{fmt.Errorf("--upload-max-file: %w", err)}
				}
				if body, err = uploadWorkdir(cmd.Context(), c, body, int64(maxFile), cmd.ErrOrStderr()); err != nil {
					return err
				}
			}
			key := f.idempotent
			if key == "" {
				key = randomKey()
			}
			v, err := c.SubmitJob(cmd.Context(), body, client.SubmitOptions{YAML: yamlBody, IdempotencyKey: key})
			if err != nil {
				return err
			}
			if f.follow && v.Array != nil {
				fmt.Fprintln(cmd.OutOrStdout(), v.ID)
				return fmt.Errorf("submitted array job %s with %d tasks; --follow follows one job: use gpufleet jobs logs -f %s-INDEX", v.ID, v.Array.Size, v.ID)
			}
			if !f.follow {
				if f.out == "table" {
					fmt.Fprintln(cmd.OutOrStdout(), v.ID)
					return nil
				}
				return render(cmd.OutOrStdout(), f.out, v, func(*tabwriter.Writer) {})
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "gpufleet: submitted %s; following its output\n", v.ID)
			final, err := followJob(cmd, c, v.ID, 0, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return jobExit(cmd, final)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", "Job manifest (YAML or JSON); '-' reads standard input")
	fl.BoolVar(&f.follow, "follow", false, "stream the job's output until it ends, then exit with its exit code")
	outputFlag(cmd, &f.out)
	fl.StringVar(&f.name, "name", "", "job name")
	fl.StringVar(&f.project, "project", "", "project (default \"default\")")
	fl.StringVar(&f.queue, "queue", "", "queue (default \"default\")")
	fl.StringVar(&f.priority, "priority", "", "priority class (default \"normal\")")
	fl.IntVar(&f.replicas, "replicas", 1, "replicas started together (a gang)")
	fl.IntVar(&f.array, "array", 0, "submit N independent tasks under one id, each with GPUFLEET_ARRAY_INDEX=0..N-1")
	fl.Float64Var(&f.gpus, "gpus", 0, "GPUs per replica")
	fl.StringSliceVar(&f.gpuModels, "gpu", nil, "allowed GPU models, in order of preference (e.g. H100,A100-80GB)")
	fl.StringVar(&f.minGPUMem, "min-gpu-memory", "", "minimum memory per GPU (e.g. 40Gi)")
	fl.Float64Var(&f.cpu, "cpu", 0, "CPUs per replica")
	fl.StringVar(&f.memory, "memory", "", "memory per replica (e.g. 64Gi)")
	fl.StringVar(&f.spot, "spot", "", "spot capacity: never, allowed or required (default never)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	fl.StringSliceVar(&f.secrets, "secret", nil, "a project secret the job gets as an environment variable of its name (repeatable; see gpufleet secrets)")
	fl.StringArrayVar(&f.tags, "tag", nil, "tag KEY=VALUE for cost attribution (repeatable)")
	fl.StringVar(&f.workdir, "workdir", "", "working directory (default: the current directory; with --image, the uploaded or empty work tree)")
	fl.StringVar(&f.cuda, "cuda", "", "the CUDA version the image needs, e.g. 12.4 (default: the image's com.nvidia.cuda.version label, when the image is on this machine)")
	fl.StringVar(&f.image, "image", "", "run in a container of this image (e.g. localhost/app:1; see gpufleet images build): only nodes with a container runtime take it")
	fl.BoolVar(&f.upload, "upload-workdir", false, "upload the working directory (at most 256 MiB) so that nodes on other machines run in a copy of it; leaves out .git and what .gitignore files and .gpufleetignore ignore")
	fl.StringVar(&f.uploadMaxFile, "upload-max-file", "64Mi", "with --upload-workdir: refuse a file larger than this (e.g. 1Gi); 0 for no limit")
	fl.StringVar(&f.runtime, "runtime", "", "runtime limit per attempt (e.g. 30m, 12h)")
	fl.StringVar(&f.grace, "grace", "", "grace period between the checkpoint signal and SIGKILL (default 30s)")
	fl.StringVar(&f.signal, "signal", "", "checkpoint signal sent before a stop (default SIGTERM)")
	fl.IntVar(&f.retries, "retries", 0, "how many failed attempts to retry")
	fl.StringArrayVar(&f.data, "data", nil, "a dataset the job reads, SRC:PATH: s3://BUCKET/PREFIX or storage:NAME/PREFIX (a storage of the project), fetched to each node and shown read-only at PATH under the job's folder (repeatable)")
	fl.StringVar(&f.idempotent, "idempotency-key", "", "key that makes a repeated submission return the first job (default: random per invocation)")
	_ = cmd.RegisterFlagCompletionFunc("spot", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"never", "allowed", "required"}, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// specFlags are the flags that describe the job itself, not how to submit it.
var specFlags = []string{"name", "project", "queue", "priority", "replicas", "array", "gpus", "gpu", "min-gpu-memory", "cpu", "memory", "spot", "env", "secret", "tag", "workdir", "image", "cuda", "runtime", "grace", "signal", "retries", "data"}

// manifest returns the body to submit and whether it is YAML.
func (f *runFlags) manifest(cmd *cobra.Command, args []string) ([]byte, bool, error) {
	if f.file != "" {
		for _, name := range specFlags {
			if cmd.Flags().Changed(name) {
				return nil, false, fmt.Errorf("--%s cannot be combined with -f: put it in the manifest", name)
			}
		}
		if len(args) > 0 {
			return nil, false, errors.New("a command after '--' cannot be combined with -f: put it in the manifest's spec.run.command")
		}
		if f.upload {
			return nil, false, errors.New("--upload-workdir works with flags, not yet with -f: give the job as flags, or upload with POST /v1/archives and set spec.run.archive")
		}
		return readManifest(f.file)
	}
	if len(args) == 0 {
		return nil, false, errors.New("nothing to run: give a command after '--' (e.g. gpufleet run -- sh -c 'echo hello') or a manifest with -f")
	}
	var fe model.FieldErrors
	job := manifest.Job{APIVersion: manifest.APIVersion, Kind: "Job"}
	job.Metadata = manifest.Metadata{Name: f.name, Project: cmpOr(f.project, f.defaultProject), Tags: keyValues("--tag", f.tags, &fe)}
	spec := &job.Spec
	spec.Queue, spec.Priority, spec.Replicas, spec.Array = f.queue, f.priority, f.replicas, f.array
	spec.Resources.GPUs, spec.Resources.CPU = f.gpus, f.cpu
	spec.Resources.GPU.Models = f.gpuModels
	spec.Resources.GPU.MinMemory = parseBytesFlag("--min-gpu-memory", f.minGPUMem, &fe)
	spec.Resources.Memory = parseBytesFlag("--memory", f.memory, &fe)
	spec.Spot = model.SpotPolicy(f.spot)
	spec.Run.Command = args
	spec.Run.Env = keyValues("--env", f.env, &fe)
	spec.Run.Secrets = f.secrets
	spec.Data = dataFlags(f.data, &fe)
	spec.Limits.Runtime = parseDurationFlag("--runtime", f.runtime, &fe)
	spec.Checkpoint.Grace = parseDurationFlag("--grace", f.grace, &fe)
	spec.Checkpoint.Signal = f.signal
	spec.Retries.Failures = f.retries
	spec.Run.Image = f.image
	spec.Run.CUDA = f.cuda
	if f.image != "" && f.cuda == "" {
		spec.Run.CUDA = runtime.LocalImageCUDA(cmd.Context(), f.image)
	}
	if f.image != "" && !f.upload {
		// A container sees no host folder: the workdir is the image's
		// path or a folder of the replica's own work tree.
		spec.Run.Workdir = f.workdir
	} else {
		wd := f.workdir
		if wd == "" {
			wd = "."
		}
		abs, err := filepath.Abs(wd)
		if err != nil {
			return nil, false, fmt.Errorf("resolving --workdir: %w", err)
		}
		spec.Run.Workdir = abs
	}
	if err := fe.Err(); err != nil {
		return nil, false, err
	}
	body, err := json.Marshal(job)
	return body, false, err
}

// readManifest reads a manifest file and resolves a relative
// spec.run.workdir against the manifest's folder.
func readManifest(path string) ([]byte, bool, error) {
	var data []byte
	var err error
	dir := "."
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
		dir = filepath.Dir(path)
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading manifest: %w", err)
	}
	asJSON, err := yaml.YAMLToJSON(data)
	if err != nil {
		// Let the server report the syntax error with its position.
		return data, true, nil
	}
	var doc map[string]any
	if json.Unmarshal(asJSON, &doc) != nil {
		return data, true, nil
	}
	spec, _ := doc["spec"].(map[string]any)
	run, _ := spec["run"].(map[string]any)
	wd, _ := run["workdir"].(string)
	if run != nil && !filepath.IsAbs(wd) {
		abs, err := filepath.Abs(filepath.Join(dir, wd))
		if err != nil {
			return nil, false, fmt.Errorf("resolving spec.run.workdir: %w", err)
		}
		run["workdir"] = abs
		out, err := json.Marshal(doc)
		return out, false, err
	}
	return asJSON, false, nil
}

func keyValues(flag string, kvs []string, fe *model.FieldErrors) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			fe.Add(flag, fmt.Sprintf("%q is not KEY=VALUE", kv))
			continue
		}
		out[k] = v
	}
	return out
}

func parseBytesFlag(flag, s string, fe *model.FieldErrors) model.Bytes {
	if s == "" {
		return 0
	}
	b, err := model.ParseBytes(s)
	if err != nil {
		fe.Add(flag, err.Error())
	}
	return b
}

func parseDurationFlag(flag, s string, fe *model.FieldErrors) model.Duration {
	if s == "" {
		return 0
	}
	d, err := model.ParseDuration(s)
	if err != nil {
		fe.Add(flag, err.Error())
	}
	return d
}

func randomKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "cli-" + hex.EncodeToString(b[:])
}

// jobExit turns a finished job into the process exit: its exit code when it
// has one, 1 for other failures, 130 when cancelled.
func jobExit(cmd *cobra.Command, v *api.JobView) error {
	fmt.Fprintf(cmd.ErrOrStderr(), "gpufleet: %s %s", v.ID, v.State)
	if v.Reason != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), " (%s)", v.Reason)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), " after %s\n", time.Since(v.SubmittedAt).Round(time.Millisecond))
	switch {
	case v.State == model.JobSucceeded:
		return nil
	case v.State == model.JobCancelled:
		return exitError{130}
	case v.ExitCode != nil && *v.ExitCode != 0:
		return exitError{*v.ExitCode}
	}
	return exitError{1}
}

// withDefaultProject sets metadata.project of a manifest that names none
// (the CLI context's default project) and returns it as JSON.
func withDefaultProject(body []byte, project string) ([]byte, error) {
	js, err := yaml.YAMLToJSON(body)
	if err != nil {
		return nil, fmt.Errorf("reading the manifest: %w", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js, &doc); err != nil || doc == nil {
		return body, nil // the server names what is wrong with it
	}
	meta, _ := doc["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	if p, _ := meta["project"].(string); p != "" {
		return js, nil
	}
	meta["project"] = project
	doc["metadata"] = meta
	return json.Marshal(doc)
}

// dataFlags reads --data SRC:PATH values (the path after the last colon).
func dataFlags(vals []string, fe *model.FieldErrors) []model.DataSource {
	var out []model.DataSource
	for _, v := range vals {
		i := strings.LastIndex(v, ":")
		src, p := v[:max(i, 0)], v[i+1:]
		if i < 0 || src == "s3" || src == "storage" || p == "" {
			fe.Add("--data", fmt.Sprintf("%q must be SRC:PATH, where the job reads it, e.g. s3://bucket/imagenet:data/", v))
			continue
		}
		out = append(out, model.DataSource{Source: src, Path: p, Mode: model.DataReadOnly})
	}
	return out
}
