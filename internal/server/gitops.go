package server

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/fleet"
	"github.com/gpufleet/gpufleet/internal/gitops"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/registry"
)

// GitOpsConfig makes the server follow a git repository that declares the
// fleet (docs/gitops.md); Repo empty follows none.
type GitOpsConfig struct {
	Repo, Branch, Path string
	// Interval is the time between polls.
	Interval time.Duration
	// AutoApply applies each new commit; otherwise its plan is pending
	// (`gpufleet plan --pending`).
	AutoApply bool
	// CredentialsRef names the sealed secret ("project/NAME") holding
	// the HTTPS credentials, "USER:TOKEN" or a token.
	CredentialsRef string
}

// newGitOps returns the GitOps component, nil when c follows no
// repository. Secrets open from the controller's vault.
func newGitOps(c GitOpsConfig, ctrl *controller.Controller, cat *catalog.Catalog, drivers *registry.Registry, log *slog.Logger) (*gitops.Syncer, error) {
	if c.Repo == "" {
		return nil, nil
	}
	open := func(project, name string) (string, error) {
		v, held, opened := ctrl.Vault().Value(project, name)
		switch {
		case opened:
			return v, nil
		case held:
			return "", fmt.Errorf("secret %s/%s does not open with this server's keys", project, name)
		}
		return "", fmt.Errorf("project %s has no secret %s (gpufleet secrets set %s %s)", project, name, project, name)
	}
	s, err := gitops.New(gitops.Config{URL: c.Repo, Branch: c.Branch, Path: c.Path, Interval: c.Interval, AutoApply: c.AutoApply,
		CredentialsRef: model.SecretRef(c.CredentialsRef), OpenSecret: open, KnownGPU: cat.KnownGPU, CheckPool: drivers.CheckPool,
		Pricing: fleet.Pricing{Offers: cat, Pool: drivers.Price}, Target: ctrl, Log: log.With("component", "gitops")})
	if err != nil {
		return nil, fmt.Errorf("--gitops-repo: %w", err)
	}
	return s, nil
}
