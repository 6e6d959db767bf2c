package kubetest

// Annotations a test puts on a Job's pod template to script what the fake
// container does. KWOK runs no containers; gpufleet's own Stages (below) read
// these annotations.
const (
	// AnnotationDuration is how long the pod runs, as a Go duration ("90s",
	// "1h"). The clock starts when KWOK marks the pod Running (right after it
	// is bound) and restarts whenever the pod object changes while it runs,
	// since KWOK re-plans a stage on every new resourceVersion. Absent or
	// unparseable: 1s. Present but empty: 0 (ends at once). An RFC 3339 time
	// is also accepted and means "until then".
	AnnotationDuration = "tags.gpufleet.dev/kwok-duration"
	// AnnotationExitCode, when it holds a positive integer, makes the pod end
	// Failed with that exit code in every container's
	// state.terminated.exitCode (reason Error). Absent, "0" or anything else:
	// the pod ends Succeeded with exit code 0 (reason Completed). The pod
	// ends Failed whatever its restartPolicy; nothing is restarted in place.
	AnnotationExitCode = "tags.gpufleet.dev/kwok-exit-code"
)

// NodeAnnotation marks the nodes KWOK manages (kwok runs with
// --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake).
const NodeAnnotation = "kwok.x-k8s.io/node"

// kwokStageFiles are the stages taken unchanged from KWOK v0.8.0's module
// (kustomize/stage, copied by tools/kube/build.sh), relative to the stages
// folder: the "fast" node and pod stages, without KWOK's pod-complete.
//
//   - node-initialize: a new node gets Ready conditions, addresses and its
//     capacity at once.
//   - node-heartbeat-with-lease: status every ~10 min; liveness comes from
//     the Lease KWOK renews (--node-lease-duration-seconds=40).
//   - pod-ready: a bound Pending pod becomes Running and Ready at once, with
//     a pod IP from --cidr that exists nowhere (never dial it).
//   - pod-delete: a pod with a deletionTimestamp is deleted at once (grace
//     period 0), once no finalizers remain.
var kwokStageFiles = []string{
	"node/fast/node-initialize.yaml",
	"node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"pod/fast/pod-ready.yaml",
	"pod/fast/pod-delete.yaml",
}

// kwokConfiguration raises KWOK's workers from 4 to 32 a queue: with 4,
// 1,000 new nodes take half a minute to become Ready on 2 busy cores. KWOK's
// client has no rate limit of its own.
const kwokConfiguration = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodePlayStageParallelism: 32
  podPlayStageParallelism: 32
  nodeLeaseParallelism: 32
`

// gpufleetStages replace KWOK's pod-complete stage. Both select Running pods
// owned by a Job that are not being deleted, and are exclusive through the
// last selector (is the exit-code annotation a positive integer?), so KWOK
// never has to choose between them. The delay is read from
// AnnotationDuration by KWOK's delay.durationFrom (jq): KWOK parses a string
// result with time.ParseDuration (or as an RFC 3339 time, minus now), falls
// back to durationMilliseconds when the expression yields nothing, and
// yields 0 for "" (sigs.k8s.io/kwok@v0.8.0 pkg/utils/lifecycle/
// value_duration_from.go). Patches are strategic merges of .status, so the
// Ready and ContainersReady conditions merge by type with the others.
//
// Pods not owned by a Job (bare pods, Deployments) run until deleted.
var gpufleetStages = podEndStage(podEnd{
	name:            "gpufleet-pod-succeed",
	positiveExit:    "false",
	conditionReason: "PodCompleted",
	exitCode:        "0",
	reason:          "Completed",
	phase:           "Succeeded",
}) + "---\n" + podEndStage(podEnd{
	name:            "gpufleet-pod-fail",
	positiveExit:    "true",
	vars:            `{{ $code := index .metadata.annotations "` + AnnotationExitCode + `" | atoi }}`,
	conditionReason: "PodFailed",
	exitCode:        "{{ $code }}",
	reason:          "Error",
	phase:           "Failed",
})

// podEnd is how one of gpufleetStages ends a pod; the strings go into the
// Stage as they are.
type podEnd struct {
	name            string // the Stage's metadata.name
	positiveExit    string // "true" or "false": the exit-code selector's value
	vars            string // a statusTemplate line defining variables, or ""
	conditionReason string // reason on the Ready and ContainersReady conditions
	exitCode        string // every container's state.terminated.exitCode
	reason          string // every container's state.terminated.reason
	phase           string // the pod's final status.phase
}

// podEndStage is the Stage that ends a Running, Job-owned pod as e says,
// after the delay AnnotationDuration asks for.
func podEndStage(e podEnd) string {
	vars := ""
	if e.vars != "" {
		vars = "      " + e.vars + "\n"
	}
	return `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: ` + e.name + `
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.metadata.ownerReferences.[].kind'
      operator: 'In'
      values: ['Job']
    - key: '(.metadata.annotations["` + AnnotationExitCode + `"] // "") | test("^0*[1-9][0-9]*$")'
      operator: 'In'
      values: ['` + e.positiveExit + `']
  delay:
    durationMilliseconds: 1000
    durationFrom:
      jq:
        expression: '.metadata.annotations["` + AnnotationDuration + `"]'
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $started := or .status.startTime $now }}
` + vars + `      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        reason: ` + e.conditionReason + `
        status: "False"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        reason: ` + e.conditionReason + `
        status: "False"
        type: ContainersReady
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: ` + e.exitCode + `
            finishedAt: {{ $now | Quote }}
            reason: ` + e.reason + `
            startedAt: {{ $started | Quote }}
      {{ end }}
      phase: ` + e.phase + `
`
}
