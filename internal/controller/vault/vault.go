// Package vault keeps the projects' sealed secrets: what jobs name in
// spec.run.secrets and budget webhooks in their refs. It owns them and its
// own lock, apart from the scheduler's. Values are sealed with the server's
// keyring before they are stored and opened only for a job's replicas, a
// webhook's delivery, and the log and event scrubber; they never reach the
// store, the API or an event in clear.
//
// A change is made in memory and submitted to the shared store.Committer
// under the lock, so changes reach the store in the order they were made,
// and answered once durable.
package vault

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"sync"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/secrets"
	"github.com/gpufleet/gpufleet/internal/store"
)

// ErrNoKeyring: the server was started without a sealing key, so it keeps
// no secrets.
var ErrNoKeyring = errors.New("this server has no sealing key (secrets.key or GPUFLEET_SECRET_KEYS)")

// ErrUnavailable: a secret is held but cannot be opened now (its key was
// retired).
var ErrUnavailable = errors.New("job secret unavailable")

// Config wires a Vault.
type Config struct {
	Committer store.Committer // required
	// Keyring seals and opens values; nil means the server keeps none
	// (writing one fails, opening one fails with ErrNoKeyring).
	Keyring *secrets.Keyring
	// Redactor, when set, is given every opened value, for scrubbing.
	Redactor *secrets.Redactor
	Clock    clock.Clock  // clock.Real{} when nil
	Log      *slog.Logger // discarded when nil
	// Guard, when set, refuses to delete a secret something still needs
	// (a budget's webhook), with the error DeleteSecret returns. It is
	// called without the vault's lock, so it may take its caller's; while
	// it runs, Has reports the secret absent, so whatever Guard checks
	// cannot start needing it unseen.
	Guard func(project, name string) error
}

// Vault holds the sealed secrets. Its methods are safe for concurrent use.
type Vault struct {
	cfg Config

	// mu guards the maps. sealed is every secret; open their values as
	// opened at load or written (a deleted secret's value stays in the
	// scrubber: running jobs may still print it); deleting counts the
	// deletions waiting on Guard.
	mu       sync.RWMutex
	sealed   map[store.SecretKey]model.Secret
	open     map[store.SecretKey]string
	deleting map[store.SecretKey]int
}

// New returns a Vault holding the stored secrets, opened for the scrubber.
// A secret that does not open (its key was retired) is kept sealed and
// logged; jobs that name it fail to start until it is written again.
func New(cfg Config, stored []model.Secret) *Vault {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	v := &Vault{cfg: cfg, sealed: map[store.SecretKey]model.Secret{}, open: map[store.SecretKey]string{}, deleting: map[store.SecretKey]int{}}
	for _, s := range stored {
		k := store.SecretKey{Project: s.Project, Name: s.Name}
		v.sealed[k] = s
		if cfg.Keyring == nil {
			continue
		}
		val, err := cfg.Keyring.Open(s.Sealed, model.SecretAAD(s.Project, s.Name))
		if err != nil {
			cfg.Log.Error("opening secret", "project", s.Project, "secret", s.Name, "err", err)
			continue
		}
		v.open[k] = string(val)
		cfg.Redactor.Add(string(val))
	}
	return v
}

// PutSecret seals value as project's secret name, replacing any earlier
// value; jobs started afterwards get the new value.
func (v *Vault) PutSecret(ctx context.Context, project, name string, value []byte) (model.SecretInfo, error) {
	if v.cfg.Keyring == nil {
		return model.SecretInfo{}, fmt.Errorf("sealing secret: %w: %w", ErrNoKeyring, model.ErrConflict)
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
	sealed, err := v.cfg.Keyring.Seal(value, model.SecretAAD(project, name))
	if err != nil {
		return model.SecretInfo{}, fmt.Errorf("sealing secret: %w", err)
	}
	k := store.SecretKey{Project: project, Name: name}
	v.mu.Lock()
	s := model.Secret{Project: project, Name: name, Sealed: sealed, Version: v.sealed[k].Version + 1, UpdatedAt: v.cfg.Clock.Now()}
	v.sealed[k] = s
	if old, ok := v.open[k]; ok {
		v.cfg.Redactor.Remove(old)
	}
	v.open[k] = string(value)
	v.cfg.Redactor.Add(string(value))
	wait := v.cfg.Committer.Commit(&store.Batch{Access: store.Access{Secrets: []model.Secret{s}}})
	v.mu.Unlock()
	if err := wait(ctx); err != nil {
		return model.SecretInfo{}, fmt.Errorf("recording secret: %w", err)
	}
	return s.Info(), nil
}

// DeleteSecret removes a secret, unless Guard refuses. Running jobs keep
// the value they were started with; queued jobs that name it fail to start.
func (v *Vault) DeleteSecret(ctx context.Context, project, name string) error {
	if name == model.DataKeySecret {
		return fmt.Errorf("secret %s of project %s is the key of its stored checkpoints; deleting it would lose them: %w", name, project, model.ErrConflict)
	}
	k := store.SecretKey{Project: project, Name: name}
	notFound := fmt.Errorf("secret %s in project %s: %w", name, project, model.ErrNotFound)
	v.mu.Lock()
	if _, ok := v.sealed[k]; !ok {
		v.mu.Unlock()
		return notFound
	}
	v.deleting[k]++
	v.mu.Unlock()
	var refused error
	if v.cfg.Guard != nil {
		refused = v.cfg.Guard(project, name)
	}
	v.mu.Lock()
	if v.deleting[k]--; v.deleting[k] == 0 {
		delete(v.deleting, k)
	}
	if refused != nil {
		v.mu.Unlock()
		return refused
	}
	if _, ok := v.sealed[k]; !ok {
		v.mu.Unlock()
		return notFound // deleted meanwhile
	}
	delete(v.sealed, k)
	// The value stays in the scrubber: it may still be in running jobs'
	// environments and so in what they report.
	wait := v.cfg.Committer.Commit(&store.Batch{Access: store.Access{DeleteSecrets: []store.SecretKey{k}}})
	v.mu.Unlock()
	return wait(ctx)
}

// Secrets lists a project's secrets ("" for every project's) by project,
// then name, without their values.
func (v *Vault) Secrets(project string) []model.SecretInfo {
	v.mu.RLock()
	out := []model.SecretInfo{}
	for k, s := range v.sealed {
		if project == "" || k.Project == project {
			out = append(out, s.Info())
		}
	}
	v.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		return out[i].Project < out[j].Project || out[i].Project == out[j].Project && out[i].Name < out[j].Name
	})
	return out
}

// ResealSecrets seals every secret not sealed with the keyring's newest key
// again with it, so the older keys can be retired. It returns how many it
// resealed.
func (v *Vault) ResealSecrets(ctx context.Context) (int, error) {
	if v.cfg.Keyring == nil {
		return 0, fmt.Errorf("resealing secrets: %w: %w", ErrNoKeyring, model.ErrConflict)
	}
	v.mu.Lock()
	var b store.Batch
	var errs []error
	for k, s := range maps.Clone(v.sealed) {
		if v.cfg.Keyring.Current(s.Sealed) {
			continue
		}
		sealed, err := v.cfg.Keyring.Reseal(s.Sealed, model.SecretAAD(k.Project, k.Name))
		if err != nil {
			errs = append(errs, fmt.Errorf("resealing %s/%s: %w", k.Project, k.Name, err))
			continue
		}
		s.Sealed = sealed
		v.sealed[k] = s
		b.Access.Secrets = append(b.Access.Secrets, s)
	}
	wait := v.cfg.Committer.Commit(&b)
	v.mu.Unlock()
	if err := wait(ctx); err != nil {
		return 0, fmt.Errorf("recording resealed secrets: %w", err)
	}
	return len(b.Access.Secrets), errors.Join(errs...)
}

// Has reports whether project holds the secret name (and it is not being
// deleted).
func (v *Vault) Has(project, name string) bool {
	k := store.SecretKey{Project: project, Name: name}
	v.mu.RLock()
	defer v.mu.RUnlock()
	_, ok := v.sealed[k]
	return ok && v.deleting[k] == 0
}

// Env opens the named secrets of project, for a replica's environment
// (name → value).
func (v *Vault) Env(project string, names []string) (map[string]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if v.cfg.Keyring == nil {
		return nil, ErrNoKeyring
	}
	env := make(map[string]string, len(names))
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, name := range names {
		s, ok := v.sealed[store.SecretKey{Project: project, Name: name}]
		if !ok {
			return nil, fmt.Errorf("secret %s of project %s: %w", name, project, model.ErrNotFound)
		}
		val, err := v.cfg.Keyring.Open(s.Sealed, model.SecretAAD(s.Project, s.Name))
		if err != nil {
			return nil, fmt.Errorf("opening secret %s of project %s: %w", name, project, err)
		}
		env[name] = string(val)
	}
	return env, nil
}

// Value returns the opened value of project's secret name, as loaded or
// last written. held is false when there is no such secret; a held one
// without a value did not open with this server's keys.
func (v *Vault) Value(project, name string) (value string, held, opened bool) {
	k := store.SecretKey{Project: project, Name: name}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if _, held = v.sealed[k]; !held {
		return "", false, false
	}
	value, opened = v.open[k]
	return value, true, opened
}

// DataKey returns project's data key (model.DataKeySecret: 32 random bytes,
// hex-encoded, sealed like any secret), creating it when the project has
// none. A new key is submitted to the committer before DataKey returns
// but not waited for: the caller sends it to a node only after a barrier
// (the agent sync's), which covers it. A held key that does not open is
// never replaced: checkpoints sealed with it would be lost.
func (v *Vault) DataKey(project string) ([]byte, error) {
	val, _, err := v.systemKey(project, model.DataKeySecret, "data key")
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(val)
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("data key of project %s is not 32 hex-encoded bytes", project)
	}
	return key, nil
}

// ServiceKey returns project's service key (model.ServiceKeySecret: 32
// random bytes, hex-encoded, sealed like any secret), creating it when the
// project has none, as DataKey does. The proxy sends it to the project's
// replicas; they get it in their environment by naming it in
// spec.run.secrets. Users cannot write it (its name is reserved); deleting
// it makes the next call create a new one. A new key is durable before
// ServiceKey returns, so a replica never holds a key a restarted or new
// leader does not.
func (v *Vault) ServiceKey(ctx context.Context, project string) (string, error) {
	val, wait, err := v.systemKey(project, model.ServiceKeySecret, "service key")
	if err != nil {
		return "", err
	}
	if wait != nil {
		if err := wait(ctx); err != nil {
			return "", fmt.Errorf("recording the service key of project %s: %w", project, err)
		}
	}
	return val, nil
}

// systemKey returns the opened value of project's server-made secret name
// (what says what it is, for errors), creating 32 random bytes, hex-encoded,
// when there is none; then wait waits until the new one is durable (nil
// when none was made). A held one that does not open is never replaced.
func (v *Vault) systemKey(project, name, what string) (val string, wait func(context.Context) error, err error) {
	if v.cfg.Keyring == nil {
		return "", nil, ErrNoKeyring
	}
	k := store.SecretKey{Project: project, Name: name}
	v.mu.Lock()
	defer v.mu.Unlock()
	if val, ok := v.open[k]; ok {
		if _, held := v.sealed[k]; held {
			return val, nil, nil
		}
	}
	if _, held := v.sealed[k]; held {
		return "", nil, fmt.Errorf("%s of project %s: %w", what, project, ErrUnavailable)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", nil, fmt.Errorf("creating a %s: %w", what, err)
	}
	val = hex.EncodeToString(key)
	sealed, err := v.cfg.Keyring.Seal([]byte(val), model.SecretAAD(project, name))
	if err != nil {
		return "", nil, fmt.Errorf("sealing the %s of project %s: %w", what, project, err)
	}
	s := model.Secret{Project: project, Name: name, Sealed: sealed, Version: 1, UpdatedAt: v.cfg.Clock.Now()}
	v.sealed[k] = s
	v.open[k] = val
	v.cfg.Redactor.Add(val)
	return val, v.cfg.Committer.Commit(&store.Batch{Access: store.Access{Secrets: []model.Secret{s}}}), nil
}
