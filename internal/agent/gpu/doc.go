// Package gpu finds the GPUs of the machine an agent runs on, or declares
// fake ones for demos and simulations, as model.GPU values with model names
// from the catalog.
//
// Discover tries, in order: the fake declaration when one is given; NVML
// when the binary is built with the nvml build tag (and cgo); nvidia-smi
// from PATH; and otherwise reports no GPUs. The default build is free of cgo.
//
// Invariants of an Inventory: GPUs are sorted by index and indexes are
// unique; Source says which of the above produced the list. NVLinkGroup
// numbers the GPUs that share an NVLink or NVSwitch domain from 0 in order of
// their lowest index, and is -1 for a GPU with no NVLink — or when the
// topology could not be read, since PCIe-only is the safe assumption for
// placement.
package gpu
