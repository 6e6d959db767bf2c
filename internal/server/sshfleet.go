package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/controller/vault"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/ssh"
)

// This file wires SSH fleets (docs/ssh-fleets.md): the ssh provider's Fleet
// follows the applied NodePools of provider ssh, installs `gpufleet agent`
// on their hosts with an agent token minted here, and removes it when a
// host leaves. Its state file lives in the data dir.

// sshFleetState is the Fleet's record of installed hosts in the data dir.
const sshFleetState = "ssh-fleet.json"

// sshTokenTTL is how long an installed agent's token lasts; a host is
// given a new one whenever its install is redone.
const sshTokenTTL = 5 * 365 * 24 * time.Hour

// sshTokens is what the fleet needs of identity: agent tokens.
type sshTokens interface {
	CreateToken(ctx context.Context, r model.TokenRequest) (*model.Token, string, error)
	Tokens() []*model.Token
	RevokeToken(ctx context.Context, id string) error
}

// sshNodes is what it needs of the controller: retiring a removed host's
// node.
type sshNodes interface {
	RetireNode(ctx context.Context, id, why string) error
}

// sshEnroller implements ssh.Enroller on identity and the controller; both
// are set before the fleet runs.
type sshEnroller struct {
	tokens sshTokens
	nodes  sshNodes
}

// vaultKeys opens SSH keys named by reference (identityRef) from the vault.
type vaultKeys struct{ v *vault.Vault }

func (k vaultKeys) OpenSecret(_ context.Context, ref model.SecretRef) ([]byte, error) {
	project, name, ok := ref.Split()
	if !ok {
		return nil, fmt.Errorf("secret reference %q: want PROJECT/NAME", ref)
	}
	v, held, opened := k.v.Value(project, name)
	switch {
	case !held:
		return nil, fmt.Errorf("secret %s: %w (write it with `gpufleet secrets set %s %s --from-file KEY`)", ref, model.ErrNotFound, project, name)
	case !opened:
		return nil, fmt.Errorf("secret %s does not open with this server's keys: %w", ref, vault.ErrUnavailable)
	}
	return []byte(v), nil
}

func sshTokenName(pool string) string { return "ssh pool " + pool }

func (e *sshEnroller) Enroll(ctx context.Context, pool, node string) (string, error) {
	_, secret, err := e.tokens.CreateToken(ctx, model.TokenRequest{Kind: model.TokenAgent, Subject: node, Name: sshTokenName(pool), TTL: sshTokenTTL})
	return secret, err
}

func (e *sshEnroller) Unenroll(ctx context.Context, pool, node string) error {
	for _, t := range e.tokens.Tokens() {
		if t.Kind == model.TokenAgent && t.Subject == node && t.Name == sshTokenName(pool) && !t.Revoked {
			if err := e.tokens.RevokeToken(ctx, t.ID); err != nil && !errors.Is(err, controller.ErrNotFound) {
				return fmt.Errorf("revoking the agent token of node %s: %w", node, err)
			}
		}
	}
	err := e.nodes.RetireNode(ctx, node, fmt.Sprintf("host left ssh pool %s", pool))
	if errors.Is(err, controller.ErrNotFound) {
		return nil // it never registered
	}
	return err
}

// newSSHFleet builds the fleet; agents reach the server at agentURL and pin
// serverCA when set. Sealed keys (identityRef) open from the vault, handed
// over in startSSHFleet.
func newSSHFleet(dataDir, agentURL string, serverCA []byte, log *slog.Logger) (*ssh.Fleet, *sshEnroller, *ssh.Dialer, error) {
	en := &sshEnroller{}
	d := &ssh.Dialer{}
	f, err := ssh.NewFleet(ssh.FleetOptions{
		Installer: &ssh.Installer{Dialer: d}, Enroller: en, Server: agentURL, CA: serverCA,
		StateFile: filepath.Join(dataDir, sshFleetState), Log: log.With("component", "ssh-fleet"),
	})
	return f, en, d, err
}

// startSSHFleet gives the fleet its control plane; the caller runs it.
func startSSHFleet(en *sshEnroller, d *ssh.Dialer, ctrl *controller.Controller) {
	en.tokens, en.nodes = ctrl.Identity(), ctrl
	d.Keys = vaultKeys{ctrl.Vault()}
}
