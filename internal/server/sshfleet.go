package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/gpufleet/gpufleet/internal/controller"
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

// sshControlPlane is what the fleet needs of the controller: agent tokens
// and retiring a removed host's node.
type sshControlPlane interface {
	CreateToken(ctx context.Context, r controller.TokenRequest) (*model.Token, string, error)
	Tokens() []*model.Token
	RevokeToken(ctx context.Context, id string) error
	RetireNode(ctx context.Context, id, why string) error
}

// sshEnroller implements ssh.Enroller on the controller; cp is set before
// the fleet runs.
type sshEnroller struct{ cp sshControlPlane }

func sshTokenName(pool string) string { return "ssh pool " + pool }

func (e *sshEnroller) Enroll(ctx context.Context, pool, node string) (string, error) {
	_, secret, err := e.cp.CreateToken(ctx, controller.TokenRequest{Kind: model.TokenAgent, Subject: node, Name: sshTokenName(pool), TTL: sshTokenTTL})
	return secret, err
}

func (e *sshEnroller) Unenroll(ctx context.Context, pool, node string) error {
	for _, t := range e.cp.Tokens() {
		if t.Kind == model.TokenAgent && t.Subject == node && t.Name == sshTokenName(pool) && !t.Revoked {
			if err := e.cp.RevokeToken(ctx, t.ID); err != nil && !errors.Is(err, controller.ErrNotFound) {
				return fmt.Errorf("revoking the agent token of node %s: %w", node, err)
			}
		}
	}
	err := e.cp.RetireNode(ctx, node, fmt.Sprintf("host left ssh pool %s", pool))
	if errors.Is(err, controller.ErrNotFound) {
		return nil // it never registered
	}
	return err
}

// newSSHFleet builds the fleet; agents reach the server at agentURL and pin
// serverCA when set. Opening sealed keys (identityRef) needs a controller
// that implements ssh.Keys, handed over in startSSHFleet; until then only
// identityFile keys work and identityRef hosts fail with a clear error.
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
	en.cp = ctrl
	if keys, ok := any(ctrl).(ssh.Keys); ok {
		d.Keys = keys
	}
}
