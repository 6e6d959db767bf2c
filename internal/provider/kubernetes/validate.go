package kubernetes

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Name is the driver's name in a NodePool's spec.provider.
const Name = model.ProviderKubernetes

// CheckPool is the kubernetes driver's check of a pool
// (registry.Driver.Check): its kubernetes block, if any (none means every
// default: the current kubeconfig context), with field paths under prefix.
func CheckPool(spec *model.NodePoolSpec, prefix string, _ func(string) bool) model.FieldErrors {
	var fe model.FieldErrors
	if spec.Kubernetes != nil {
		fe = ValidateSettings(spec.Kubernetes, prefix+".kubernetes")
	}
	if st := spec.CheckpointStorage; st != nil {
		if st.Path != "" {
			fe.Add(prefix+".checkpointStorage.path", "a Kubernetes pool's pods see no folder of the server's or the nodes': declare s3 storage")
		}
		if spec.Kubernetes == nil || spec.Kubernetes.SyncImage == "" {
			fe.Add(prefix+".kubernetes.syncImage", "is required with checkpointStorage: an image holding the gpufleet binary, from which each pod's checkpoint containers run (docs/kubernetes.md)")
		}
	}
	return fe
}

func bad(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }

// ValidateSettings reports every problem in a pool's kubernetes block k, with paths under prefix (usually
// "spec.kubernetes").
func ValidateSettings(k *model.KubernetesPoolSettings, prefix string) model.FieldErrors {
	var fe model.FieldErrors
	p := func(f string) string { return prefix + "." + f }
	if k.InCluster && (k.Kubeconfig != "" || k.Context != "") {
		fe.Add(p("inCluster"), "uses the service account of the pod gpufleet runs in: leave kubeconfig and context out")
	}
	if strings.TrimSpace(k.Kubeconfig) != k.Kubeconfig {
		fe.Add(p("kubeconfig"), "must not start or end with spaces")
	}
	if k.Namespace != "" && !model.ValidName(k.Namespace) {
		fe.Add(p("namespace"), fmt.Sprintf("%q is not a namespace name: lower-case letters, digits and dashes (at most 63)", k.Namespace))
	}
	for field, v := range map[string]string{"gpuResource": k.GPUResource, "gpuModelLabel": k.GPUModelLabel, "capacityTypeLabel": k.CapacityTypeLabel} {
		if v != "" {
			if msg := qualifiedNameProblem(v); msg != "" {
				fe.Add(p(field), fmt.Sprintf("%q %s", v, msg))
			}
		}
	}
	if bad(k.PricePerGPUHour) || k.PricePerGPUHour < 0 {
		fe.Add(p("pricePerGPUHour"), "must be a non-negative number of USD per GPU-hour")
	}
	for field, v := range map[string]string{"image": k.Image, "syncImage": k.SyncImage} {
		if strings.ContainsFunc(v, unicode.IsSpace) {
			fe.Add(p(field), fmt.Sprintf("%q is not an image reference", v))
		}
	}
	if k.QueueName != "" && !validLabelValue(k.QueueName) {
		fe.Add(p("queueName"), fmt.Sprintf("%q is not a label value (at most 63 letters, digits, '-', '_' and '.')", k.QueueName))
	}
	for _, key := range slices.Sorted(maps.Keys(k.NodeSelector)) {
		kp := fmt.Sprintf("%s[%q]", p("nodeSelector"), key)
		if msg := qualifiedNameProblem(key); msg != "" {
			fe.Add(kp, fmt.Sprintf("key %s", msg))
		}
		if !validLabelValue(k.NodeSelector[key]) {
			fe.Add(kp, fmt.Sprintf("%q is not a label value (at most 63 letters, digits, '-', '_' and '.')", k.NodeSelector[key]))
		}
	}
	if bad(k.ClientQPS) || k.ClientQPS < 0 {
		fe.Add(p("clientQPS"), "must not be negative (0: the default, 500)")
	}
	if k.ClientBurst < 0 {
		fe.Add(p("clientBurst"), "must not be negative (0: the default, 1000)")
	}
	if k.PendingTimeout < 0 {
		fe.Add(p("pendingTimeout"), "must not be negative (0: the default, 10m)")
	}
	if k.GatePort < 0 || k.GatePort > 65535 {
		fe.Add(p("gatePort"), fmt.Sprintf("%d is not a TCP port (1-65535; 0: the default, %d)", k.GatePort, DefaultGatePort))
	}
	if k.KeepFinished != nil && (*k.KeepFinished < 0 || k.KeepFinished.D() > maxKeepFinished) {
		fe.Add(p("keepFinished"), "must be between 0 (delete finished Jobs at once) and 8760h")
	}
	return fe
}

// maxKeepFinished bounds model.KubernetesPoolSettings.KeepFinished to a year,
// well inside ttlSecondsAfterFinished's int32 seconds.
const maxKeepFinished = 365 * 24 * time.Hour

// labelNameRE is the name part of a Kubernetes label key or resource name;
// labelValueRE a label value.
var (
	labelNameRE    = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	labelValueRE   = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)
	dnsSubdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// qualifiedNameProblem says what is wrong with a Kubernetes qualified name
// (a label key or extended resource name: [prefix/]name), or "" when
// nothing is.
func qualifiedNameProblem(s string) string {
	prefix, name, found := strings.Cut(s, "/")
	if !found {
		prefix, name = "", s
	} else if prefix == "" || len(prefix) > 253 || !dnsSubdomainRE.MatchString(prefix) {
		return "has a prefix that is not a DNS subdomain (such as nvidia.com)"
	}
	if !labelNameRE.MatchString(name) {
		return "is not a label key or resource name: [prefix/]name, the name at most 63 letters, digits, '-', '_' and '.'"
	}
	return ""
}

func validLabelValue(s string) bool { return labelValueRE.MatchString(s) }
