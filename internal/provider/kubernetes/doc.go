// Package kubernetes is the Kubernetes backend (DESIGN.md §4): a cluster is
// both a provider of fixed capacity and a runner of gpufleet's replicas.
// gpufleet picks the cluster, GPU model and capacity type; kube-scheduler
// picks the node.
//
// As a provider, a Cluster groups the cluster's schedulable, ready GPU
// nodes by GPU model, capacity type, region and zone. Each group is split
// into virtual nodes ("chunks") of at most maxChunkGPUs (64) GPUs, the most
// the scheduler tracks on one node: chunk i holds the group's allocatable
// GPUs from i×64 on, numbered from 0, and its share of the group's CPU,
// memory and price (the pool's price per GPU-hour, or the catalog's price
// of the nodes' instance type); its offer is that capacity. Chunk 0 is
// named <pool>-<hash>, chunk i <pool>-<hash>-i. Each virtual node is its
// own placement group (model.LabelPlacementGroup), so the scheduler keeps
// a multi-node gang on one virtual node and each attempt is one Job; a
// gang therefore needs at most 64 GPUs of one group. When a group shrinks,
// its last chunks shrink or go (registered with no GPUs, then retired);
// when it grows, chunks are added. gpufleet cannot launch or terminate
// Kubernetes nodes, so Launch and Terminate answer
// provider.ErrFixedCapacity.
//
// As a runner, Cluster.Run is the agent of every virtual node: it registers
// the node with the control plane, long-polls its desired set, and carries
// each attempt out as a batch/v1 Job (an indexed Job and a headless Service
// for gangs; a ClusterIP Service on its port for a service's replica, whose
// name the replica's status reports as its endpoint) whose pods select the
// group's nodes. Status flows back through
// informers on Jobs, pods and nodes; logs are streamed from the pods.
//
// Invariants:
//   - Every object the driver creates carries the label
//     gpufleet.dev/managed-by=<pool> and lives in the pool's namespace;
//     Objects lists them, DeleteObjects removes them.
//   - A Job's name is a function of its attempt and first rank, so a
//     restarted runner adopts the Jobs it finds instead of creating new
//     ones; a create that meets an existing Job adopts it.
//   - Nothing polls the API server: state comes from informers, and writes
//     go through a bounded pool of workers.
//   - The driver never dials a pod or Service address; logs come through
//     the API server.
//   - A service's replica is reached only through its gate (gate.go): a
//     native sidecar from the pool's syncImage that its Service targets and
//     that reads the replica key from the attempt's Secret. Unless the
//     pool's networkPolicy is false, a default-deny NetworkPolicy covers
//     the pool's pods, and each service replica's and gang's attempt has a
//     policy admitting only what it needs, made after its Service and
//     deleted before it.
//   - No secret value (the job token, run.secrets) is written into a Job:
//     they live in a Secret named like the Job, made with it, that the pod
//     reads through secretKeyRef; it is deleted as soon as the attempt's
//     end is recorded. The checkpoint storage's credentials and the
//     project's data key (podsync.Spec) are a key of that Secret too,
//     referenced only by the pod's sync containers (sync.go), never by
//     the job's.
//   - A Job that ended on its own stays for the pool's keepFinished
//     (ttlSecondsAfterFinished: the cluster's TTL controller deletes it);
//     gpufleet deletes every other Job once it is done with it.
//   - A pod unschedulable for the pool's pendingTimeout ends its replica
//     lost; one timer per virtual node, on the Options clock, watches the
//     earliest such deadline.
package kubernetes
