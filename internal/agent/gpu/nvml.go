//go:build nvml && cgo

package gpu

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpufleet/gpufleet/internal/model"
)

// discoverNVML lists the GPUs through NVML. ok is false when the NVML
// library or the driver is missing, so discovery falls back to nvidia-smi.
//
// NVLink domains come from each GPU's active links: a link's remote end is
// another GPU or an NVSwitch, named by its PCI bus id, and GPUs reachable
// through those ends share a group.
func discoverNVML() (gpus []model.GPU, ok bool, err error) {
	lib := nvml.New()
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, false, nil
	default:
		return nil, false, fmt.Errorf("initializing NVML: %w", ret)
	}
	defer lib.Shutdown()

	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, false, fmt.Errorf("counting GPUs: %w", ret)
	}
	busIDs := make([]string, n)
	var links [][2]string
	for i := range n {
		gpu, bus, devLinks, err := nvmlDevice(lib, i)
		if err != nil {
			return nil, false, fmt.Errorf("reading GPU %d: %w", i, err)
		}
		gpus = append(gpus, gpu)
		busIDs[i] = bus
		links = append(links, devLinks...)
	}
	for i, g := range nvlinkGroups(busIDs, links) {
		gpus[i].NVLinkGroup = g
	}
	return gpus, true, nil
}

// nvmlDevice reads GPU i, its PCI bus id and its active NVLinks.
func nvmlDevice(lib nvml.Interface, i int) (model.GPU, string, [][2]string, error) {
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return model.GPU{}, "", nil, fmt.Errorf("getting handle: %w", ret)
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return model.GPU{}, "", nil, fmt.Errorf("reading UUID: %w", ret)
	}
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return model.GPU{}, "", nil, fmt.Errorf("reading name: %w", ret)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return model.GPU{}, "", nil, fmt.Errorf("reading memory: %w", ret)
	}
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return model.GPU{}, "", nil, fmt.Errorf("reading PCI info: %w", ret)
	}
	bus := busID(pci.BusId)
	var links [][2]string
	for link := range nvml.NVLINK_MAX_LINKS {
		// GPUs without NVLink, and links past the last, answer
		// NOT_SUPPORTED or INVALID_ARGUMENT.
		state, ret := dev.GetNvLinkState(link)
		if ret != nvml.SUCCESS || state != nvml.FEATURE_ENABLED {
			continue
		}
		remote, ret := dev.GetNvLinkRemotePciInfo(link)
		if ret != nvml.SUCCESS {
			continue
		}
		links = append(links, [2]string{bus, busID(remote.BusId)})
	}
	memory := model.Bytes(mem.Total)
	return model.GPU{
		Index:       i,
		UUID:        uuid,
		Model:       CatalogName(name, memory),
		Memory:      memory,
		NVLinkGroup: -1,
	}, bus, links, nil
}

// busID turns NVML's NUL-terminated bus id into a comparable string.
func busID(raw [32]int8) string {
	var b strings.Builder
	for _, c := range raw {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return strings.ToLower(b.String())
}
