package gpu

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// maxFake bounds a fake declaration; no real machine has more GPUs.
const maxFake = 64

// ParseFake parses a declaration of demo GPUs: "COUNTxMODEL" such as "8xH100"
// or "2xA100-80GB", or just "MODEL" for one. memoryOf looks the model up in
// the catalog; a model it does not know is an error naming it.
//
// The GPUs are indexed from 0, have the deterministic UUIDs "GPU-fake-0",
// "GPU-fake-1", … and share NVLink group 0: fake GPUs act like one SXM
// board, whatever the model's real interconnect.
func ParseFake(s string, memoryOf func(name string) (model.Bytes, bool)) ([]model.GPU, error) {
	count, name, err := splitFake(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("parsing fake GPUs %q: %w", s, err)
	}
	if memoryOf == nil {
		return nil, fmt.Errorf("parsing fake GPUs %q: no catalog to look the model up in", s)
	}
	memory, ok := memoryOf(name)
	if !ok {
		return nil, fmt.Errorf("parsing fake GPUs %q: the catalog has no GPU model %q; use a catalog model name such as H100, A100-80GB or L4", s, name)
	}
	gpus := make([]model.GPU, count)
	for i := range gpus {
		gpus[i] = model.GPU{Index: i, UUID: "GPU-fake-" + strconv.Itoa(i), Model: name, Memory: memory, NVLinkGroup: 0}
	}
	return gpus, nil
}

// splitFake splits "8xH100" into 8 and "H100"; a declaration without a count
// prefix is one GPU.
func splitFake(s string) (count int, name string, err error) {
	if s == "" {
		return 0, "", errors.New("empty; want COUNTxMODEL such as 8xH100")
	}
	count, name = 1, s
	if i := strings.IndexAny(s, "xX"); i > 0 {
		if n, err := strconv.Atoi(s[:i]); err == nil {
			count, name = n, s[i+1:]
		}
	}
	if count < 1 || count > maxFake {
		return 0, "", fmt.Errorf("count %d out of range; want 1 to %d", count, maxFake)
	}
	if name == "" {
		return 0, "", errors.New("no model; want COUNTxMODEL such as 8xH100")
	}
	return count, name, nil
}
