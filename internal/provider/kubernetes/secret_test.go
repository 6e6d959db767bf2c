package kubernetes

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// withSecrets gives s a job token and one job secret, as the controller
// hands them out.
func withSecrets(s agentapi.ReplicaSpec) agentapi.ReplicaSpec {
	s.Env["GPUFLEET_JOB_TOKEN"] = "gft_job_s3cr3t-token-value"
	s.Env["HF_TOKEN"] = "hf_very-secret-value"
	s.SecretEnv = []string{"GPUFLEET_JOB_TOKEN", "HF_TOKEN"}
	return s
}

func TestSecretsStayOutOfTheJob(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{}, h100("n1").obj())
	h.run()
	s := withSecrets(spec("j-sec", 0, 1, 0))
	h.cp.want(h.node, s)
	job := h.job("gf-j-sec-a1-r0")

	raw, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{s.Env["GPUFLEET_JOB_TOKEN"], s.Env["HF_TOKEN"]} {
		if strings.Contains(string(raw), v) {
			t.Errorf("the Job holds secret value %q", v)
		}
	}
	refs := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			refs[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	wantRefs := map[string]string{"GPUFLEET_JOB_TOKEN": job.Name + "/GPUFLEET_JOB_TOKEN", "HF_TOKEN": job.Name + "/HF_TOKEN"}
	if diff := cmp.Diff(wantRefs, refs); diff != "" {
		t.Errorf("secret references (-want +got):\n%s", diff)
	}

	var sec *corev1.Secret
	eventually(t, "the Job's Secret", func() bool {
		sec, err = h.cs.CoreV1().Secrets(DefaultNamespace).Get(bg, job.Name, metav1.GetOptions{})
		return err == nil
	})
	got := map[string]string{}
	for k, v := range sec.Data {
		got[k] = string(v)
	}
	if diff := cmp.Diff(map[string]string{"GPUFLEET_JOB_TOKEN": s.Env["GPUFLEET_JOB_TOKEN"], "HF_TOKEN": s.Env["HF_TOKEN"]}, got); diff != "" {
		t.Errorf("secret data (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(job.Labels, sec.Labels); diff != "" {
		t.Errorf("secret labels (-job +secret):\n%s", diff)
	}
	if len(sec.OwnerReferences) != 0 {
		t.Errorf("secret owners = %+v, want none (the runner deletes it)", sec.OwnerReferences)
	}
	objs, err := h.c.Objects(bg)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range attemptObjects(objs) {
		kinds = append(kinds, o.Kind+"/"+o.Name)
	}
	if diff := cmp.Diff([]string{"Job/" + job.Name, "Secret/" + job.Name}, kinds); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}

	pod := podOf(job, 0, "n1", corev1.PodSucceeded)
	h.createPod(exited(pod, 0))
	h.waitPhase(s.ID, agentapi.PhaseExited)
	eventually(t, "the Job deleted", func() bool { return h.jobGone(job.Name) })
	eventually(t, "the Secret deleted with it", func() bool {
		_, err := h.cs.CoreV1().Secrets(DefaultNamespace).Get(bg, job.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func TestStopDeletesTheSecret(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{}, h100("n1").obj())
	h.run()
	s := withSecrets(spec("j-secstop", 0, 1, 0))
	h.cp.want(h.node, s)
	job := h.job("gf-j-secstop-a1-r0")
	eventually(t, "the Job's Secret", func() bool {
		_, err := h.cs.CoreV1().Secrets(DefaultNamespace).Get(bg, job.Name, metav1.GetOptions{})
		return err == nil
	})
	h.cp.stop(h.node, s.AttemptID)
	h.waitPhase(s.ID, agentapi.PhaseExited)
	eventually(t, "nothing of the attempt left", func() bool {
		objs, err := h.c.Objects(bg)
		return err == nil && len(attemptObjects(objs)) == 0
	})
}

func TestOrphanSecretsAndPoolRemoval(t *testing.T) {
	c, cs := startCluster(t, model.KubernetesPoolSettings{}, h100("n1").obj())
	ms, _ := c.Machines(bg)
	plan := jobPlan{pool: "k8s", settings: c.opts.Settings, node: targetOf(c.groups()[0]), specs: []agentapi.ReplicaSpec{withSecrets(spec("j-gone", 0, 1, 0))}}
	job, _ := plan.build()
	// The Secret of a Job deleted while gpufleet was down, before the
	// garbage collector (absent here) took it; and a live Job's.
	if _, err := cs.CoreV1().Secrets(DefaultNamespace).Create(bg, plan.secret(job), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, c: c, cs: cs, cp: newFakeCP(), node: ms[0].ID}
	h.run()
	eventually(t, "the orphan Secret deleted", func() bool {
		_, err := cs.CoreV1().Secrets(DefaultNamespace).Get(bg, job.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})

	s := withSecrets(spec("j-live", 0, 1, 0))
	h.cp.want(h.node, s)
	live := h.job("gf-j-live-a1-r0")
	eventually(t, "the live Job's Secret", func() bool {
		objs, _ := c.Objects(bg)
		return len(attemptObjects(objs)) == 2
	})
	if err := c.DeleteObjects(bg); err != nil {
		t.Fatal(err)
	}
	if objs, err := c.Objects(bg); err != nil || len(objs) != 0 {
		t.Errorf("after DeleteObjects: %v, %v (Job %s)", objs, err, live.Name)
	}
}

func TestSecretKeys(t *testing.T) {
	for name, tc := range map[string]struct {
		env    map[string]string
		secret []string
		want   []string
	}{
		"token only, from an older server": {map[string]string{"GPUFLEET_JOB_TOKEN": "t", "A": "a"}, nil, []string{"GPUFLEET_JOB_TOKEN"}},
		"named secrets":                    {map[string]string{"GPUFLEET_JOB_TOKEN": "t", "B": "b"}, []string{"GPUFLEET_JOB_TOKEN", "B"}, []string{"B", "GPUFLEET_JOB_TOKEN"}},
		"a name without a value":           {map[string]string{"A": "a"}, []string{"GONE"}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			got := secretKeys(agentapi.ReplicaSpec{Env: tc.env, SecretEnv: tc.secret})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A run that ended between creating a Job and its Secret: the next run
// adopts the Job and makes the Secret, owned by it.
func TestAdoptedJobGetsItsSecret(t *testing.T) {
	c, cs := startCluster(t, model.KubernetesPoolSettings{}, h100("n1").obj())
	ms, _ := c.Machines(bg)
	s := withSecrets(spec("j-half", 0, 1, 0))
	plan := jobPlan{pool: "k8s", settings: c.opts.Settings, node: targetOf(c.groups()[0]), specs: []agentapi.ReplicaSpec{s}}
	job, _ := plan.build()
	job.UID = "uid-of-the-job" // the fake clientset assigns none
	if _, err := cs.BatchV1().Jobs(DefaultNamespace).Create(bg, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Job in the cache", func() bool { return c.job(job.Name) != nil })
	h := &harness{t: t, c: c, cs: cs, cp: newFakeCP(), node: ms[0].ID}
	h.run()
	h.cp.want(h.node, s)

	var sec *corev1.Secret
	eventually(t, "the adopted Job's Secret", func() bool {
		var err error
		sec, err = cs.CoreV1().Secrets(DefaultNamespace).Get(bg, job.Name, metav1.GetOptions{})
		return err == nil
	})
	got := map[string]string{}
	for k, v := range sec.Data {
		got[k] = string(v)
	}
	if diff := cmp.Diff(map[string]string{"GPUFLEET_JOB_TOKEN": s.Env["GPUFLEET_JOB_TOKEN"], "HF_TOKEN": s.Env["HF_TOKEN"]}, got); diff != "" {
		t.Errorf("secret data (-want +got):\n%s", diff)
	}
	if o := sec.OwnerReferences; len(o) != 0 {
		t.Errorf("secret owners = %+v, want none", o)
	}
	if n := len(h.actions("create", "jobs")); n != 1 {
		t.Errorf("%d Job creates, want 1 (the test's)", n)
	}
}

// attemptObjects drops the objects that live as long as the pool.
func attemptObjects(objs []Object) []Object {
	return slices.DeleteFunc(objs, func(o Object) bool { return o.Pool })
}
