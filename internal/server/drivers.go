package server

import (
	"github.com/gpufleet/gpufleet/internal/provider/aws"
	"github.com/gpufleet/gpufleet/internal/provider/kubernetes"
	"github.com/gpufleet/gpufleet/internal/provider/local"
	"github.com/gpufleet/gpufleet/internal/provider/registry"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
	"github.com/gpufleet/gpufleet/internal/provider/ssh"
	"github.com/gpufleet/gpufleet/internal/provider/static"
)

// Drivers lists the provider drivers gpufleet ships, by the name a
// NodePool's spec.provider gives: how each checks and prices a pool, and,
// from builders (by name), what the scale loop builds for a pool of a
// driver it launches into (none where a component of its own follows the
// pools: static, local, ssh, kubernetes). Adding a driver adds one entry
// here. With no builders the list checks and prices pools only, as the
// CLI does before sending a fleet.
func Drivers(builders map[string]registry.Factory) []registry.Driver {
	return []registry.Driver{
		{Name: aws.Name, Check: aws.CheckPool, Price: aws.PoolPrice, New: builders[aws.Name]},
		{Name: kubernetes.Name, Check: kubernetes.CheckPool, Price: kubernetes.PoolPrice, New: builders[kubernetes.Name]},
		{Name: local.Name, Price: local.PoolPrice, New: builders[local.Name]},
		{Name: sim.Name, Check: sim.CheckPool, Price: sim.PoolPrice, New: builders[sim.Name]},
		{Name: ssh.Name, Check: ssh.CheckPool, Price: ssh.PoolPrice, New: builders[ssh.Name]},
		{Name: static.Name, Check: static.CheckPool, Price: static.PoolPrice, New: builders[static.Name]},
	}
}

// PoolChecks is the registry of Drivers without builders: what checks a
// fleet's NodePools (manifest.Checks.Pool) where no server runs.
func PoolChecks() *registry.Registry {
	r, err := registry.New(Drivers(nil)...)
	if err != nil {
		panic(err) // a name twice in Drivers: a programming error
	}
	return r
}
