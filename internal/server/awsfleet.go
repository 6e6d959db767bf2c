package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/controller/identity"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/aws"
	"github.com/gpufleet/gpufleet/internal/provider/registry"
)

// awsJoinTTL is how long a launched instance's join token is valid: its
// boot, download of the binary and first contact must fit.
const awsJoinTTL = time.Hour

// awsCluster is the gpufleet:cluster tag of this server's instances.
const awsCluster = "gpufleet"

// joinTokens mints launched instances' join tokens from the identity
// component, once the controller (which owns it) exists.
type joinTokens struct{ id func() *identity.Identity }

func (j joinTokens) JoinToken(ctx context.Context, pool, node string) (string, error) {
	id := j.id()
	if id == nil {
		return "", errors.New("the server is still starting")
	}
	return id.MintJoinToken(ctx, pool, node, awsJoinTTL)
}

// awsFactory builds EC2 pools' drivers, each from its spec.aws block; id
// gives the identity component its join tokens come from.
func awsFactory(cat *catalog.Catalog, id func() *identity.Identity, log *slog.Logger) registry.Factory {
	return func(pool *model.NodePool) (provider.Provider, error) {
		if pool.Spec.AWS == nil {
			return nil, fmt.Errorf("pool %s has no spec.aws block", pool.Name)
		}
		return aws.New(context.Background(), *pool.Spec.AWS, aws.Options{
			Cluster: awsCluster, Pool: pool.Name, Catalog: cat,
			JoinTokens: joinTokens{id: id}, Logger: log.With("component", "aws"),
		})
	}
}

// ctrlIdentity is ctrl's identity component, nil before ctrl exists.
func ctrlIdentity(ctrl *controller.Controller) *identity.Identity {
	if ctrl == nil {
		return nil
	}
	return ctrl.Identity()
}
