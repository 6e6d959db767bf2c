package aws

import (
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Settings are a pool's `aws` block (model.AWSPoolSettings, where the
// NodePool spec holds them); Settings.Validate(prefix) checks them with
// field paths.
type Settings = model.AWSPoolSettings

// Bootstrap is what an instance's user-data needs (model.AWSBootstrap).
type Bootstrap = model.AWSBootstrap

// settingsPath is where the block sits in a NodePool manifest.
const settingsPath = "spec.aws"

// PoolPrice prices an aws pool for `gpufleet plan` (the registry's
// PoolPricer): its nodes cost what the catalog's aws offers cost.
func PoolPrice(model.NodePoolSpec) provider.PoolPrice {
	return provider.PoolPrice{Clouds: []string{Name}}
}
