package model

import (
	"fmt"
	"strings"
	"time"
)

// Tags that mark a job as a replica of a service: the service owns the job.
const (
	// TagService names the service a replica job belongs to.
	TagService = "gpufleet.dev/service"
	// TagServiceGeneration is the service generation (spec revision) the
	// replica was made from; a rolling update replaces older ones.
	TagServiceGeneration = "gpufleet.dev/service-generation"
	// TagServiceSlot is the replica's slot: it listens on port + slot.
	TagServiceSlot = "gpufleet.dev/service-slot"
)

// Autoscaling metrics a service may scale on.
const (
	ScaleOnInFlight = "inflight" // requests in flight per ready replica
	ScaleOnRate     = "rps"      // requests per second per ready replica
	// ScaleOnLatency scales on the 95th percentile of the proxy's time to
	// a response's first byte over the last 30 s; the target is seconds.
	ScaleOnLatency = "p95"
)

// Service auth modes.
const (
	AuthPublic = "public" // anyone who reaches the server
	AuthToken  = "token"  // a gpufleet token with a role in the service's project
	AuthAPIKey = "apiKey" // a key held in one of the project's sealed secrets
)

// ServiceKeySecret is the project secret whose value the proxy sends to
// every replica of the project's services as "Authorization: Bearer KEY"
// and each replica gets in its environment under the same name, so a
// replica that checks it (vLLM's --api-key "$GPUFLEET_SERVICE_KEY")
// answers only the proxy, not another workload that can reach its port.
// The service manager creates it (32 random bytes, hex) on a project's
// first service.
const ServiceKeySecret = "GPUFLEET_SERVICE_KEY"

// ReplicaUnreachableHeader is set by an agent's gate (docs/services.md,
// "Isolation") on a 502 it answers when nothing reached the replica, so
// the proxy may send the request to another replica as it would after a
// refused connection.
const ReplicaUnreachableHeader = "Gpufleet-Replica-Unreachable"

// MaxServiceSlots bounds max + maxSurge, so port + slot stays a small range.
const MaxServiceSlots = 256

// ServiceSpec is an inference endpoint: replicas made from a job template,
// reached through the server's proxy at /services/NAME/.
type ServiceSpec struct {
	// Template is the replica's job spec; each replica is one job whose
	// replicas field must be 1. It starts with PORT set.
	Template JobSpec `json:"template"`
	// Port is the first port replicas listen on: replica slot i gets
	// PORT=port+i, so several replicas share a host network.
	Port        int                `json:"port"`
	Readiness   ReadinessProbe     `json:"readiness,omitempty"`
	Replicas    ServiceReplicas    `json:"replicas,omitempty"`
	Autoscaling ServiceAutoscaling `json:"autoscaling,omitempty"`
	Update      RollingUpdate      `json:"update,omitempty"`
	Auth        ServiceAuth        `json:"auth,omitempty"`
	// Hosts are host names the proxy routes to the service by the Host
	// header, besides /services/NAME/: exact names (chat.example.com) or
	// one-label wildcards (*.chat.example.com). A name (or wildcard) is
	// one service's only.
	Hosts []string `json:"hosts,omitempty"`
}

// ReadinessProbe is an HTTP GET that must answer 2xx before a replica
// gets traffic.
type ReadinessProbe struct {
	Path         string   `json:"path,omitempty"`
	Timeout      Duration `json:"timeout,omitempty"`
	InitialDelay Duration `json:"initialDelay,omitempty"`
	Period       Duration `json:"period,omitempty"`
}

// ServiceReplicas bounds the replica count; Target is the count when no
// autoscaling metric is set, and the start otherwise.
type ServiceReplicas struct {
	Min    int `json:"min"`
	Max    int `json:"max,omitempty"`
	Target int `json:"target,omitempty"`
	// OnDemandShare is the share of the desired replicas (rounded up)
	// that run on on-demand capacity (spot: never) whatever the
	// template's spot policy; the others follow it (allowed: spot where
	// there is some, else on-demand). 0 to 1.
	OnDemandShare float64 `json:"onDemandShare,omitempty"`
}

// ServiceAutoscaling scales between min and max on the proxy's metrics.
type ServiceAutoscaling struct {
	// Metric is inflight, rps or p95; empty keeps the replica count at
	// target.
	Metric string `json:"metric,omitempty"`
	// Target is the metric's value per ready replica to aim for (inflight,
	// rps), or the p95 latency in seconds (p95).
	Target float64 `json:"target,omitempty"`
	// ScaleUpWindow and ScaleDownWindow: the count changes to the highest
	// (up) or lowest-but-highest (down) recommendation seen over the window,
	// so a short burst or lull does not flap it.
	ScaleUpWindow   Duration `json:"scaleUpWindow,omitempty"`
	ScaleDownWindow Duration `json:"scaleDownWindow,omitempty"`
	// ScaleFromZeroTimeout is how long a request waits for a first replica
	// when there is none (min 0); then it gets 503.
	ScaleFromZeroTimeout Duration `json:"scaleFromZeroTimeout,omitempty"`
	// QueueLimit bounds requests held while no replica is ready; past it
	// they get 503 with Retry-After.
	QueueLimit int `json:"queueLimit,omitempty"`
}

// RollingUpdate bounds a rolling update: how many replicas above the count
// may run and how many below it may be unready meanwhile.
type RollingUpdate struct {
	MaxSurge       int `json:"maxSurge,omitempty"`
	MaxUnavailable int `json:"maxUnavailable,omitempty"`
}

// ServiceAuth says who may call the service.
type ServiceAuth struct {
	// Mode is token (default), public or apiKey.
	Mode string `json:"mode,omitempty"`
	// Secrets, for mode apiKey, name secrets of the service's project
	// (gpufleet secrets set); a caller presenting any one's value as
	// "Authorization: Bearer KEY" is let in. Several allow rotating keys.
	Secrets []string `json:"secrets,omitempty"`
}

// Service defaults.
const (
	DefaultProbeTimeout         = Duration(2 * time.Second)
	DefaultProbePeriod          = Duration(time.Second)
	DefaultScaleDownWindow      = Duration(60 * time.Second)
	DefaultScaleFromZeroTimeout = Duration(120 * time.Second)
	DefaultQueueLimit           = 100
)

// Default fills empty fields with their defaults. It is idempotent.
func (s *ServiceSpec) Default() {
	s.Template.Default()
	if s.Readiness.Path == "" {
		s.Readiness.Path = "/"
	}
	if s.Readiness.Timeout == 0 {
		s.Readiness.Timeout = DefaultProbeTimeout
	}
	if s.Readiness.Period == 0 {
		s.Readiness.Period = DefaultProbePeriod
	}
	if s.Replicas.Max == 0 {
		s.Replicas.Max = max(s.Replicas.Min, s.Replicas.Target, 1)
	}
	if s.Replicas.Target == 0 && s.Autoscaling.Metric == "" {
		s.Replicas.Target = max(s.Replicas.Min, 1)
	}
	if s.Autoscaling.ScaleDownWindow == 0 {
		s.Autoscaling.ScaleDownWindow = DefaultScaleDownWindow
	}
	if s.Autoscaling.ScaleFromZeroTimeout == 0 {
		s.Autoscaling.ScaleFromZeroTimeout = DefaultScaleFromZeroTimeout
	}
	if s.Autoscaling.QueueLimit == 0 {
		s.Autoscaling.QueueLimit = DefaultQueueLimit
	}
	if s.Update.MaxSurge == 0 && s.Update.MaxUnavailable == 0 {
		s.Update.MaxSurge = 1
	}
	if s.Auth.Mode == "" {
		s.Auth.Mode = AuthToken
	}
}

// Validate reports every problem in s, with paths under prefix (usually
// "spec"); knownGPU is as for JobSpec.Validate.
func (s *ServiceSpec) Validate(prefix string, knownGPU func(string) bool) FieldErrors {
	fe := s.Template.Validate(prefix+".template", knownGPU)
	p := func(f string) string { return prefix + "." + f }
	if s.Template.Replicas > 1 {
		fe.Add(p("template.replicas"), "must be 1: a service replica is one process; scale with spec.replicas")
	}
	if s.Template.Array > 0 {
		fe.Add(p("template.array"), "must be empty: a service replica is not an array job")
	}
	if s.Port < 1 || s.Port > 65535 {
		fe.Add(p("port"), "must be a TCP port, 1 to 65535")
	} else if s.Port+s.Replicas.Max+s.Update.MaxSurge > 65535 {
		fe.Add(p("port"), "port + replicas.max + update.maxSurge must stay ≤ 65535 (replica i listens on port+i)")
	}
	if r := s.Readiness.Path; r != "" && !strings.HasPrefix(r, "/") {
		fe.Add(p("readiness.path"), "must start with /")
	}
	for f, d := range map[string]Duration{"readiness.timeout": s.Readiness.Timeout, "readiness.initialDelay": s.Readiness.InitialDelay,
		"readiness.period": s.Readiness.Period, "autoscaling.scaleUpWindow": s.Autoscaling.ScaleUpWindow,
		"autoscaling.scaleDownWindow": s.Autoscaling.ScaleDownWindow, "autoscaling.scaleFromZeroTimeout": s.Autoscaling.ScaleFromZeroTimeout} {
		if d < 0 {
			fe.Add(p(f), "must be ≥ 0")
		} else if d.D() > 24*time.Hour {
			fe.Add(p(f), "must be ≤ 24h")
		}
	}
	r := s.Replicas
	switch {
	case r.Min < 0:
		fe.Add(p("replicas.min"), "must be ≥ 0")
	case r.Max < 0:
		fe.Add(p("replicas.max"), "must be ≥ 0")
	case r.Max > 0 && r.Min > r.Max:
		fe.Add(p("replicas.min"), fmt.Sprintf("must be ≤ replicas.max (%d)", r.Max))
	case r.Target < 0 || (r.Target > 0 && (r.Target < r.Min || (r.Max > 0 && r.Target > r.Max))):
		fe.Add(p("replicas.target"), "must lie between replicas.min and replicas.max")
	}
	if !(r.OnDemandShare >= 0 && r.OnDemandShare <= 1) {
		fe.Add(p("replicas.onDemandShare"), "must be 0 to 1 (the share of replicas kept on on-demand capacity)")
	}
	if r.Max+s.Update.MaxSurge > MaxServiceSlots {
		fe.Add(p("replicas.max"), fmt.Sprintf("replicas.max + update.maxSurge must be ≤ %d", MaxServiceSlots))
	}
	a := s.Autoscaling
	switch a.Metric {
	case "":
	case ScaleOnInFlight, ScaleOnRate:
		if !(a.Target > 0) || a.Target > 1e6 {
			fe.Add(p("autoscaling.target"), "must be > 0 and ≤ 1e6 (the metric's value per replica)")
		}
	case ScaleOnLatency:
		if !(a.Target >= 0.001) || a.Target > 600 {
			fe.Add(p("autoscaling.target"), "must be 0.001 to 600 (the p95 latency to aim for, in seconds)")
		}
	default:
		fe.Add(p("autoscaling.metric"), fmt.Sprintf("%q is not a metric: use inflight, rps or p95", a.Metric))
	}
	if a.QueueLimit < 0 || a.QueueLimit > 100000 {
		fe.Add(p("autoscaling.queueLimit"), "must be 0 to 100000")
	}
	if s.Update.MaxSurge < 0 {
		fe.Add(p("update.maxSurge"), "must be ≥ 0")
	}
	if s.Update.MaxUnavailable < 0 {
		fe.Add(p("update.maxUnavailable"), "must be ≥ 0")
	}
	switch s.Auth.Mode {
	case "", AuthPublic, AuthToken:
		if len(s.Auth.Secrets) > 0 {
			fe.Add(p("auth.secrets"), "is only for auth.mode apiKey")
		}
	case AuthAPIKey:
		if len(s.Auth.Secrets) == 0 {
			fe.Add(p("auth.secrets"), "must name at least one secret of the project holding an API key (gpufleet secrets set PROJECT NAME)")
		}
		if len(s.Auth.Secrets) > 16 {
			fe.Add(p("auth.secrets"), "must name at most 16 secrets")
		}
		for i, name := range s.Auth.Secrets {
			if !secretNameRE.MatchString(name) {
				fe.Add(fmt.Sprintf("%s[%d]", p("auth.secrets"), i), fmt.Sprintf("%q is not a secret name (letters, digits and _, not starting with a digit)", name))
			} else if name == ServiceKeySecret {
				fe.Add(fmt.Sprintf("%s[%d]", p("auth.secrets"), i), ServiceKeySecret+" is the key the proxy gives replicas; name a key of your own")
			}
		}
	default:
		fe.Add(p("auth.mode"), fmt.Sprintf("%q is not an auth mode: use token, public or apiKey", s.Auth.Mode))
	}
	if len(s.Hosts) > MaxServiceHosts {
		fe.Add(p("hosts"), fmt.Sprintf("must name at most %d hosts", MaxServiceHosts))
	}
	seen := map[string]bool{}
	for i, h := range s.Hosts {
		path := fmt.Sprintf("%s[%d]", p("hosts"), i)
		if err := CheckHost(h); err != nil {
			fe.Add(path, err.Error())
		} else if seen[h] {
			fe.Add(path, fmt.Sprintf("%s is named twice", h))
		}
		seen[h] = true
	}
	return fe
}

// MaxServiceHosts bounds a service's spec.hosts.
const MaxServiceHosts = 32

// CheckHost says what is wrong with h as a service's host name: it must be
// a lower-case DNS name of at least two labels (letters, digits and
// hyphens, 1 to 63 characters each, no hyphen at either end; 253 in all),
// without port or trailing dot, optionally "*." and such a name, which
// matches any one label in place of the star.
func CheckHost(h string) error {
	name := strings.TrimPrefix(h, "*.")
	switch {
	case h == "":
		return fmt.Errorf("must not be empty")
	case h != strings.ToLower(h):
		return fmt.Errorf("%q must be lower case", h)
	case strings.ContainsAny(h, ":/"):
		return fmt.Errorf("%q must be a host name alone, without scheme, port or path", h)
	case len(name) > 253:
		return fmt.Errorf("%q is longer than 253 characters", h)
	case strings.Contains(name, "*"):
		return fmt.Errorf("%q: a wildcard is \"*.\" followed by a name, once, at the start", h)
	}
	labels := strings.Split(name, ".")
	if len(labels) < 2 {
		return fmt.Errorf("%q must have at least two labels (chat.example.com)", h)
	}
	for _, l := range labels {
		ok := len(l) >= 1 && len(l) <= 63 && l[0] != '-' && l[len(l)-1] != '-'
		for _, c := range l {
			ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
		}
		if !ok {
			return fmt.Errorf("%q: label %q must be 1 to 63 letters, digits or hyphens, not starting or ending with a hyphen", h, l)
		}
	}
	return nil
}

// Service is a service as the server keeps it.
type Service struct {
	Name    string            `json:"name"`
	Project string            `json:"project"`
	User    string            `json:"user,omitempty"`
	Tags    map[string]string `json:"tags,omitempty"`
	Spec    ServiceSpec       `json:"spec"`
	// Generation increases when the spec changes; replicas of an older
	// one are replaced by a rolling update.
	Generation int `json:"generation"`
	// Trusted is set when an admin applied the service: its replicas are
	// trusted jobs (Job.Trusted).
	Trusted bool `json:"trusted,omitempty"`
	// Requests and Tokens count what the proxy served since the service
	// was created (tokens from OpenAI-style usage); the server stores them
	// every minute, so a restart loses at most a minute's count.
	Requests  int64     `json:"requests,omitempty"`
	Tokens    int64     `json:"tokens,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	// Decisions are the autoscaler's latest decisions (service-scale
	// events), oldest first: at most MaxServiceDecisions, stored with the
	// service, so a restarted server or a new leader still shows them.
	Decisions []Event `json:"decisions,omitempty"`
}

// MaxServiceDecisions bounds the decisions a service keeps.
const MaxServiceDecisions = 50

// ServiceReplica is one replica as the server sees it.
type ServiceReplica struct {
	Job        string   `json:"job"`
	Slot       int      `json:"slot"`
	Generation int      `json:"generation"`
	State      string   `json:"state"` // pending, starting, ready, unready, draining
	JobState   JobState `json:"jobState"`
	Address    string   `json:"address,omitempty"`
	InFlight   int      `json:"inFlight"`
}

// Replica states a service reports.
const (
	ReplicaPending  = "pending"  // the job is not running yet
	ReplicaStarting = "starting" // running, not yet ready
	ReplicaReady    = "ready"
	ReplicaUnready  = "unready" // was ready, fails its probe now
	ReplicaDraining = "draining"
)

// ReplicaStates lists replica states, for metrics.
var ReplicaStates = []string{ReplicaPending, ReplicaStarting, ReplicaReady, ReplicaUnready, ReplicaDraining}

// ServiceStatus is a service with what its replicas and proxy report.
type ServiceStatus struct {
	Service
	// Desired is the replica count the autoscaler asks for now.
	Desired  int              `json:"desired"`
	Ready    int              `json:"ready"`
	Replicas []ServiceReplica `json:"replicas"`
	InFlight int              `json:"inFlight"`
	Requests int64            `json:"requests"`
	Tokens   int64            `json:"tokens"`
	URL      string           `json:"url"`
	// Cost is what the ledger attributes to the service's replicas (jobs
	// tagged with it) since it was created, in whole hours of the ledger
	// from the hour it was created in; CostPerHour what its running
	// replicas cost now (their share of their nodes' prices, as the ledger
	// splits them: by GPUs, or by CPUs on a node without GPUs);
	// CostPerMillionTokens is Cost per million Tokens (0 before any).
	Cost                 Money `json:"cost"`
	CostPerHour          Money `json:"costPerHour"`
	CostPerMillionTokens Money `json:"costPerMillionTokens,omitempty"`
	// Load is what the autoscaler measures now.
	Load ServiceLoad `json:"load"`
}

// ServiceLoad is what the proxy measures of a service, as its autoscaler
// reads it.
type ServiceLoad struct {
	// Rate is requests per second over the last 10 s.
	Rate float64 `json:"rate"`
	// Waiting counts requests held for a replica to turn ready.
	Waiting int `json:"waiting"`
	// P95Seconds is the 95th percentile of the time to a response's
	// first byte over the last 30 s, over LatencySamples requests.
	P95Seconds     float64 `json:"p95Seconds"`
	LatencySamples int     `json:"latencySamples"`
}

// ProxyTable is what a service proxy routes by: every service with its
// ready replicas, as the server's endpoint list (GET /v1/proxy/endpoints)
// serves it to a separate `gpufleet proxy`, and as the server's own proxy
// is given it.
type ProxyTable struct {
	// Version increases whenever the table changes.
	Version uint64 `json:"version"`
	// Domain, when set, routes host NAME.DOMAIN to service NAME.
	Domain   string       `json:"domain,omitempty"`
	Services []ProxyRoute `json:"services"`
}

// ProxyRoute is one service as a proxy routes it.
type ProxyRoute struct {
	Name    string      `json:"name"`
	Project string      `json:"project"`
	Auth    ServiceAuth `json:"auth"`
	Hosts   []string    `json:"hosts,omitempty"`
	// QueueLimit and ScaleFromZeroTimeout bound the requests held while
	// no replica is ready (spec.autoscaling).
	QueueLimit           int      `json:"queueLimit"`
	ScaleFromZeroTimeout Duration `json:"scaleFromZeroTimeout"`
	// ReplicaKey is the project's replica key (ServiceKeySecret), sent to
	// every replica as a bearer token; "" for none.
	ReplicaKey string `json:"replicaKey,omitempty"`
	// Replicas are the replicas that take new requests (ready, not
	// draining).
	Replicas []ProxyReplica `json:"replicas"`
}

// ProxyReplica is one ready replica.
type ProxyReplica struct {
	Job     string `json:"job"`
	Slot    int    `json:"slot"`
	Address string `json:"address"`
}

// ProxyLoad is what one proxy measured of one service since its last
// report: the autoscaler adds up every proxy's.
type ProxyLoad struct {
	// InFlight counts requests being served or held; Waiting those held
	// for a replica to turn ready.
	InFlight int `json:"inFlight"`
	Waiting  int `json:"waiting"`
	// Rate is requests per second over the last 10 s.
	Rate float64 `json:"rate"`
	// Requests and Tokens were counted since the last report.
	Requests int64 `json:"requests"`
	Tokens   int64 `json:"tokens"`
	// Latency counts the last 30 s of times to first byte per bucket of
	// the proxy's latency histogram (LatencyBounds, then one slower).
	Latency []int `json:"latency,omitempty"`
	// Replicas counts requests in flight per replica job (drained
	// replicas stop when every proxy's count is 0).
	Replicas map[string]int `json:"replicas,omitempty"`
	// Failed lists replica jobs a request failed on: the server probes
	// them at once.
	Failed []string `json:"failed,omitempty"`
}

// ProxyReport is what a proxy sends the server (POST /v1/proxy/load).
type ProxyReport struct {
	// Proxy identifies the proxy process (a report replaces its last).
	Proxy    string               `json:"proxy"`
	Services map[string]ProxyLoad `json:"services"`
}
