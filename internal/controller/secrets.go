package controller

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/gpufleet/gpufleet/internal/controller/vault"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// ErrNoKeyring: the server was started without a sealing key, so it keeps
// no secrets.
var ErrNoKeyring = vault.ErrNoKeyring

// errSecretUnavailable: a job names a secret that cannot be opened now.
var errSecretUnavailable = vault.ErrUnavailable

// guardSecret is the vault's Guard: a secret a budget's webhook names is
// not deleted while the fleet declares it.
func (c *Controller) guardSecret(project, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if users := c.webhookUsersLocked(store.SecretKey{Project: project, Name: name}); len(users) > 0 {
		return fmt.Errorf("secret %s in project %s is the webhook of %s; apply the fleet without it first: %w", name, project, strings.Join(users, ", "), ErrConflict)
	}
	return nil
}

// checkSecretsLocked refuses a submission that names a secret its project
// does not hold. Callers hold c.mu.
func (c *Controller) checkSecretsLocked(s *Submission) model.FieldErrors {
	var fe model.FieldErrors
	for i, name := range s.Spec.Run.Secrets {
		if !c.vault.Has(s.Project, name) {
			fe.Add(fmt.Sprintf("spec.run.secrets[%d]", i), fmt.Sprintf("project %s has no secret %q (gpufleet secrets set %s %s)", s.Project, name, s.Project, name))
		}
	}
	return fe
}

// secretEnvLocked opens the secrets a job names, for its replicas'
// environment. Callers hold c.mu.
func (c *Controller) secretEnvLocked(job *model.Job) (map[string]string, error) {
	return c.vault.Env(job.Project, job.Spec.Run.Secrets)
}

// secretEnvNames names the environment variables of a replica whose values
// are secret: its job's opened secrets and its job token, sorted.
func secretEnvNames(sec map[string]string) []string {
	out := append(slices.Collect(maps.Keys(sec)), "GPUFLEET_JOB_TOKEN")
	sort.Strings(out)
	return slices.Compact(out)
}
