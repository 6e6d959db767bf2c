package api

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufleet/gpufleet/internal/model"
)

// DefaultMaxInflightWrites is Config.MaxInflightWrites' default: well above
// the submission benchmark's 64 clients, each with one request in flight.
const DefaultMaxInflightWrites = 128

// ShedRetryAfter is the Retry-After a shed request is answered with.
const ShedRetryAfter = time.Second

// shedder bounds the users' writes in flight (submissions waiting for
// their group commit above all), so that a flood of them cannot queue the
// agents' syncs, registrations and log uploads behind it: those, like
// job tokens' checkpoint reports and every read, never wait for a slot.
// A write that finds no slot free is answered 503 with Retry-After at once,
// before its handler runs, so it changed nothing and the client may resend
// it as it was (the API client does, with its idempotency key).
type shedder struct {
	slots chan struct{} // nil: no limit
	shed  *prometheus.CounterVec
}

func newShedder(limit int, reg prometheus.Registerer) (*shedder, error) {
	s := &shedder{shed: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpufleet_http_shed_total",
		Help: "Client writes answered 503 (Retry-After) because the server had its limit of writes in flight, by route.",
	}, []string{"route"})}
	if err := reg.Register(s.shed); err != nil {
		return nil, err
	}
	if limit > 0 {
		s.slots = make(chan struct{}, limit)
	}
	return s, nil
}

// sheddable says whether a route is a user's write, which waits for a slot.
func sheddable(rt Route) bool {
	if rt.Public || rt.Method == http.MethodGet || rt.Method == http.MethodHead || len(rt.Kinds) == 0 {
		return false
	}
	return !slices.ContainsFunc(rt.Kinds, func(k model.TokenKind) bool { return k != model.TokenUser })
}

// admit takes a slot for a request of route label, or answers 503 and
// reports false; release gives the slot back.
func (s *shedder) admit(w http.ResponseWriter, r *http.Request, label string) (release func(), ok bool) {
	if s.slots == nil {
		return func() {}, true
	}
	select {
	case s.slots <- struct{}{}:
		return func() { <-s.slots }, true
	default:
	}
	s.shed.WithLabelValues(label).Inc()
	w.Header().Set("Retry-After", strconv.Itoa(int(ShedRetryAfter/time.Second)))
	writeProblem(w, r, http.StatusServiceUnavailable, "the server is busy: "+strconv.Itoa(cap(s.slots))+
		" writes are in flight (its --max-inflight-writes); nothing was done, so send the request again after Retry-After (gpufleet's CLI does, with the same idempotency key)", nil)
	return nil, false
}
