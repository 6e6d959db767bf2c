// Package podsync is what runs beside a replica in a Kubernetes pod
// (docs/kubernetes.md, "Checkpoints and datasets"): the pod-side half of
// the checkpoint sync and dataset fetch that an agent does on its own node.
// The Kubernetes runner (package provider/kubernetes) adds to the pod, from
// the pool's kubernetes.syncImage (an image holding the gpufleet binary):
//
//   - an init container "gpufleet-data" (`gpufleet pod fetch-data`) that
//     fetches spec.data into the pod's data volume, dataset i under "<i>",
//     each then mounted read-only (subPath) at its path in the job's
//     container;
//   - an init container "gpufleet-restore" (`gpufleet pod restore`) that
//     restores the job's latest checkpoint into the checkpoint volume;
//   - a sidecar "gpufleet-checkpoint" (`gpufleet pod sync`, a native
//     sidecar: an init container that keeps running) that uploads each new
//     checkpoint the job marks and once more when the kubelet stops it
//     after the job's container ended.
//
// A service's replica gets a fourth, "gpufleet-gate" (`gpufleet pod gate`,
// a native sidecar, gate.go): the agent's gate (package gate) listening on
// the port the replica's Service targets and forwarding to the replica on
// the pod's loopback only the requests that carry the project's replica
// key, which it reads from the attempt's Secret.
//
// Each sync container reads its Spec from the environment variable EnvSpec, which the pod
// takes from the attempt's Secret (secretKeyRef): the storage credentials
// and the project's data key exist in the cluster only while the attempt
// does (the runner deletes the Secret when its end is recorded), and only
// these containers reference them, never the job's container.
//
// The syncing itself is ckptsync's and datacache's, as on an agent
// (ckptsync.Open, datacache.OpenDataset, datacache.Fetch).
package podsync
