package gpu

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Sources of an inventory, as recorded in model.Node.GPUSource.
const (
	SourceNVML      = "nvml"
	SourceNvidiaSMI = "nvidia-smi"
	SourceFake      = "fake"
	SourceNone      = "none"
)

// Options configures Discover. The zero value discovers real GPUs.
type Options struct {
	// Fake declares demo GPUs instead ("8xH100"; see ParseFake).
	Fake string
	// MemoryOf looks a model up in the catalog; Fake needs it.
	MemoryOf func(name string) (model.Bytes, bool)
	// NvidiaSMI is the nvidia-smi program to run. Empty means "nvidia-smi"
	// from PATH, and none there means no GPUs; a named program that cannot
	// run is an error.
	NvidiaSMI string
	// Logger receives warnings, such as an unreadable NVLink topology.
	// Nil discards them.
	Logger *slog.Logger
}

// Inventory is the GPUs of a machine and where the list came from.
type Inventory struct {
	GPUs   []model.GPU
	Source string
}

// Discover lists the machine's GPUs. A machine without GPUs, driver or
// nvidia-smi is an empty inventory with Source "none", not an error; an error
// means GPU tooling is present but failing (or Fake is invalid), which an
// operator should see. Discover runs nvidia-smi under ctx, which should
// carry a deadline: a wedged driver can hang it.
func Discover(ctx context.Context, opts Options) (Inventory, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Fake != "" {
		gpus, err := ParseFake(opts.Fake, opts.MemoryOf)
		if err != nil {
			return Inventory{}, err
		}
		return Inventory{GPUs: gpus, Source: SourceFake}, nil
	}
	gpus, ok, err := discoverNVML()
	if err != nil {
		return Inventory{}, fmt.Errorf("discovering GPUs with NVML: %w", err)
	}
	if ok {
		return Inventory{GPUs: gpus, Source: SourceNVML}, nil
	}
	return discoverNvidiaSMI(ctx, opts.NvidiaSMI, opts.Logger)
}
