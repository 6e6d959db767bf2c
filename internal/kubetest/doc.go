// Package kubetest runs a real Kubernetes control plane on loopback for
// gpufleet's integration tests: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and KWOK, each a child process of the test binary, in a
// temporary folder. Only tests import it.
//
// What it owns: the child processes, their ports and files, a kubeconfig
// (bearer token of a system:masters user, insecure-skip-tls-verify), and the
// fake GPU nodes it creates. Nothing listens beyond 127.0.0.1; pod and node
// IPs that KWOK hands out exist nowhere, so tests never dial them.
//
// Binaries come from tools/kube/build.sh (see Start). Start gives each test
// its own control plane (5 to 9 s to start on 2 busy cores); Shared gives
// every test of a package one control plane, so tests that share it must
// keep to their own namespaces and node labels.
//
// # What the fake cluster does
//
// KWOK plays the kubelet. A bound pod becomes Running and Ready at once. A
// pod of a Job then runs for AnnotationDuration (default 1s) and ends
// Succeeded, or Failed with AnnotationExitCode. Other pods run until deleted.
// Deleting a pod deletes it at once (no grace period), once its finalizers
// are gone (the Job controller removes its own).
//
// Node loss. DeleteNode deletes the Node object only, as a cloud does when it
// reclaims a spot VM. KWOK then stops managing the node's pods: they stay
// Running, bound to a node that no longer exists, and KWOK may still apply a
// pod's pending completion stage, so give a pod that must outlive its node a
// long AnnotationDuration. kube-controller-manager's PodGC collects the
// orphans: it scans every 20 s and quarantines a missing node for 40 s, so
// 40 to 80 s after the deletion each orphan is patched to phase Failed with
// condition DisruptionTarget (reason DeletionByPodGC) and deleted with grace
// period 0 (measured: 60 s). The Job controller counts it as failed and,
// within backoffLimit, creates a replacement pod after its failure backoff
// (about 10 s for a Job's first failure, doubling after). GCOrphanedPods
// does what PodGC does, at once, for tests that cannot wait.
package kubetest
