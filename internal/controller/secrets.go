package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// ErrNoKeyring: the server was started without a sealing key, so it keeps
// no secrets.
var ErrNoKeyring = errors.New("this server has no sealing key (secrets.key or GPUFLEET_SECRET_KEYS)")

// errSecretUnavailable: a job names a secret that cannot be opened now.
var errSecretUnavailable = errors.New("job secret unavailable")

// vault is the controller's sealed job secrets and, for the log and event
// scrubber only, their opened values. Values never reach the store, the API
// or an event.
type vault struct {
	sealed map[store.SecretKey]model.Secret
	open   map[store.SecretKey]string
}

// loadSecrets takes the stored secrets and opens them for the scrubber. A
// secret that does not open (its key was retired) is kept sealed and
// logged; jobs that name it fail to start until it is written again.
func (c *Controller) loadSecrets(list []model.Secret) {
	for _, v := range c.vault.open {
		c.cfg.Redactor.Remove(v)
	}
	c.vault = vault{sealed: map[store.SecretKey]model.Secret{}, open: map[store.SecretKey]string{}}
	for _, s := range list {
		k := store.SecretKey{Project: s.Project, Name: s.Name}
		c.vault.sealed[k] = s
		if c.cfg.Keyring == nil {
			continue
		}
		v, err := c.cfg.Keyring.Open(s.Sealed, model.SecretAAD(s.Project, s.Name))
		if err != nil {
			c.cfg.Log.Error("opening secret", "project", s.Project, "secret", s.Name, "err", err)
			continue
		}
		c.vault.open[k] = string(v)
		c.cfg.Redactor.Add(string(v))
	}
}

// PutSecret seals value as project's secret name, replacing any earlier
// value; jobs started afterwards get the new value.
func (c *Controller) PutSecret(ctx context.Context, project, name string, value []byte) (model.SecretInfo, error) {
	if c.cfg.Keyring == nil {
		return model.SecretInfo{}, fmt.Errorf("sealing secret: %w: %w", ErrNoKeyring, ErrConflict)
	}
	var fe model.FieldErrors
	if msg := model.ValidateSecretName(name); msg != "" {
		fe.Add("name", msg)
	}
	if len(value) == 0 || len(value) > model.MaxSecretBytes {
		fe.Add("value", fmt.Sprintf("must be 1 to %d bytes", model.MaxSecretBytes))
	}
	if len(fe) > 0 {
		return model.SecretInfo{}, fe
	}
	sealed, err := c.cfg.Keyring.Seal(value, model.SecretAAD(project, name))
	if err != nil {
		return model.SecretInfo{}, fmt.Errorf("sealing secret: %w", err)
	}
	k := store.SecretKey{Project: project, Name: name}
	c.mu.Lock()
	s := model.Secret{Project: project, Name: name, Sealed: sealed, Version: c.vault.sealed[k].Version + 1, UpdatedAt: c.cfg.Clock.Now()}
	c.vault.sealed[k] = s
	if old, ok := c.vault.open[k]; ok {
		c.cfg.Redactor.Remove(old)
	}
	c.vault.open[k] = string(value)
	c.cfg.Redactor.Add(string(value))
	cm := c.com.submit(&store.Batch{Access: store.Access{Secrets: []model.Secret{s}}})
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return model.SecretInfo{}, fmt.Errorf("recording secret: %w", err)
	}
	return s.Info(), nil
}

// DeleteSecret removes a secret. Running jobs keep the value they were
// started with; queued jobs that name it fail to start.
func (c *Controller) DeleteSecret(ctx context.Context, project, name string) error {
	if name == model.DataKeySecret {
		return fmt.Errorf("secret %s of project %s is the key of its stored checkpoints; deleting it would lose them: %w", name, project, ErrConflict)
	}
	k := store.SecretKey{Project: project, Name: name}
	c.mu.Lock()
	if _, ok := c.vault.sealed[k]; !ok {
		c.mu.Unlock()
		return fmt.Errorf("secret %s in project %s: %w", name, project, ErrNotFound)
	}
	if users := c.webhookUsersLocked(k); len(users) > 0 {
		c.mu.Unlock()
		return fmt.Errorf("secret %s in project %s is the webhook of budget %s; apply the fleet without it first: %w", name, project, strings.Join(users, ", "), ErrConflict)
	}
	delete(c.vault.sealed, k)
	// The value stays in the scrubber: it may still be in running jobs'
	// environments and so in what they report.
	cm := c.com.submit(&store.Batch{Access: store.Access{DeleteSecrets: []store.SecretKey{k}}})
	c.mu.Unlock()
	return cm.wait(ctx)
}

// Secrets lists a project's secrets ("" for every project's) by project,
// then name, without their values.
func (c *Controller) Secrets(project string) []model.SecretInfo {
	c.mu.Lock()
	out := []model.SecretInfo{}
	for k, s := range c.vault.sealed {
		if project == "" || k.Project == project {
			out = append(out, s.Info())
		}
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		return out[i].Project < out[j].Project || out[i].Project == out[j].Project && out[i].Name < out[j].Name
	})
	return out
}

// ResealSecrets seals every secret not sealed with the keyring's newest key
// again with it, so the older keys can be retired. It returns how many it
// resealed.
func (c *Controller) ResealSecrets(ctx context.Context) (int, error) {
	if c.cfg.Keyring == nil {
		return 0, fmt.Errorf("resealing secrets: %w: %w", ErrNoKeyring, ErrConflict)
	}
	c.mu.Lock()
	var b store.Batch
	var errs []error
	for k, s := range maps.Clone(c.vault.sealed) {
		if c.cfg.Keyring.Current(s.Sealed) {
			continue
		}
		sealed, err := c.cfg.Keyring.Reseal(s.Sealed, model.SecretAAD(k.Project, k.Name))
		if err != nil {
			errs = append(errs, fmt.Errorf("resealing %s/%s: %w", k.Project, k.Name, err))
			continue
		}
		s.Sealed = sealed
		c.vault.sealed[k] = s
		b.Access.Secrets = append(b.Access.Secrets, s)
	}
	cm := c.com.submit(&b)
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return 0, fmt.Errorf("recording resealed secrets: %w", err)
	}
	return len(b.Access.Secrets), errors.Join(errs...)
}

// checkSecretsLocked refuses a submission that names a secret its project
// does not hold. Callers hold c.mu.
func (c *Controller) checkSecretsLocked(s *Submission) model.FieldErrors {
	var fe model.FieldErrors
	for i, name := range s.Spec.Run.Secrets {
		if _, ok := c.vault.sealed[store.SecretKey{Project: s.Project, Name: name}]; !ok {
			fe.Add(fmt.Sprintf("spec.run.secrets[%d]", i), fmt.Sprintf("project %s has no secret %q (gpufleet secrets set %s %s)", s.Project, name, s.Project, name))
		}
	}
	return fe
}

// secretEnvLocked opens the secrets a job names, for its replicas'
// environment. Callers hold c.mu.
func (c *Controller) secretEnvLocked(job *model.Job) (map[string]string, error) {
	if len(job.Spec.Run.Secrets) == 0 {
		return nil, nil
	}
	if c.cfg.Keyring == nil {
		return nil, ErrNoKeyring
	}
	env := make(map[string]string, len(job.Spec.Run.Secrets))
	for _, name := range job.Spec.Run.Secrets {
		s, ok := c.vault.sealed[store.SecretKey{Project: job.Project, Name: name}]
		if !ok {
			return nil, fmt.Errorf("secret %s of project %s: %w", name, job.Project, ErrNotFound)
		}
		v, err := c.cfg.Keyring.Open(s.Sealed, model.SecretAAD(s.Project, s.Name))
		if err != nil {
			return nil, fmt.Errorf("opening secret %s of project %s: %w", name, job.Project, err)
		}
		env[name] = string(v)
	}
	return env, nil
}

// secretEnvNames names the environment variables of a replica whose values
// are secret: its job's opened secrets and its job token, sorted.
func secretEnvNames(sec map[string]string) []string {
	out := append(slices.Collect(maps.Keys(sec)), "GPUFLEET_JOB_TOKEN")
	sort.Strings(out)
	return slices.Compact(out)
}
