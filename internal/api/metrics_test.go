package api_test

import (
	"bufio"
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sample is one line of the Prometheus text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// exposition is a parsed /metrics page: families' types and every sample.
// It reads only what these tests need (no timestamps, no exemplars).
type exposition struct {
	types   map[string]string
	samples []sample
}

// scrape reads /metrics as token and parses the text exposition.
func (e *testEnv) scrape(t *testing.T, token string) exposition {
	t.Helper()
	r := e.do(t, req{Method: "GET", Path: "/metrics", Token: token})
	if r.Status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", r.Status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET /metrics: Content-Type %q, want the text exposition", ct)
	}
	x := exposition{types: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			x.types[name] = typ
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			t.Fatalf("parsing metrics line %q: %v", line, err)
		}
		x.samples = append(x.samples, s)
	}
	return x
}

// parseSample parses `name{k="v",...} value`.
func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, strconv.ErrSyntax
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for line[0] != '}' {
			k, rest, ok := strings.Cut(line, "=")
			if !ok {
				return s, strconv.ErrSyntax
			}
			v, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return s, err
			}
			if s.labels[k], err = strconv.Unquote(v); err != nil {
				return s, err
			}
			line = strings.TrimPrefix(rest[len(v):], ",")
			if line == "" {
				return s, strconv.ErrSyntax
			}
		}
		line = line[1:]
	}
	var err error
	s.value, err = strconv.ParseFloat(strings.TrimSpace(line), 64)
	return s, err
}

// value returns the sample with exactly these labels, and whether there is one.
func (x exposition) value(name string, labels map[string]string) (float64, bool) {
	for _, s := range x.samples {
		if s.name == name && cmp.Equal(labels, s.labels) {
			return s.value, true
		}
	}
	return 0, false
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.submit(t, jobManifest("one"))
	e.submit(t, jobManifest("two"))
	if r := e.do(t, req{Method: "GET", Path: "/v1/jobs"}); r.Status != http.StatusUnauthorized {
		t.Fatalf("GET /v1/jobs without a token: %d", r.Status)
	}
	x := e.scrape(t, e.admin)

	route := func(r, code string) map[string]string { return map[string]string{"route": r, "code": code} }
	none := map[string]string{}
	tests := map[string]struct {
		family, typ, sample string
		labels              map[string]string
		// ok judges the sample's value.
		ok func(float64) bool
	}{
		"queued jobs":    {"gpufleet_jobs", "gauge", "gpufleet_jobs", map[string]string{"state": "queued"}, eq(2)},
		"running jobs":   {"gpufleet_jobs", "gauge", "gpufleet_jobs", map[string]string{"state": "running"}, eq(0)},
		"submissions":    {"gpufleet_jobs_submitted_total", "counter", "gpufleet_jobs_submitted_total", none, eq(2)},
		"submit timing":  {"gpufleet_api_request_duration_seconds", "histogram", "gpufleet_api_request_duration_seconds_count", route("POST /v1/jobs", "201"), eq(2)},
		"refusal timing": {"gpufleet_api_request_duration_seconds", "histogram", "gpufleet_api_request_duration_seconds_count", route("GET /v1/jobs", "401"), eq(1)},
		"queue wait":     {"gpufleet_queue_wait_seconds", "histogram", "gpufleet_queue_wait_seconds_count", none, eq(0)}, // nothing bound yet
		// The admin token, two jobs and the audit entries of the requests
		// (mutations and refusals), perhaps grouped into fewer commits.
		"store commits": {"gpufleet_store_commit_seconds", "histogram", "gpufleet_store_commit_seconds_count", none, func(v float64) bool { return v >= 1 && v <= 10 }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := x.types[tc.family]; got != tc.typ {
				t.Errorf("%s has type %q, want %q", tc.family, got, tc.typ)
			}
			v, ok := x.value(tc.sample, tc.labels)
			if !ok {
				t.Fatalf("no %s%v in /metrics", tc.sample, tc.labels)
			}
			if !tc.ok(v) {
				t.Errorf("%s%v = %v", tc.sample, tc.labels, v)
			}
		})
	}
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

// TestMetricsQueueWait: binding a job observes how long it waited.
func TestMetricsQueueWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.submit(t, jobManifest("wait"))
	agent := e.registerNode(t, 1)
	agent.waitReplicas(t, 1)
	got, _ := e.scrape(t, e.admin).value("gpufleet_queue_wait_seconds_count", map[string]string{})
	if got != 1 {
		t.Errorf("gpufleet_queue_wait_seconds_count = %v, want 1", got)
	}
}

func TestParseSample(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		line string
		want sample
	}{
		"bare":    {`up 1`, sample{"up", map[string]string{}, 1}},
		"labels":  {`a_count{route="GET /v1/jobs/{id}",code="200"} 3`, sample{"a_count", map[string]string{"route": "GET /v1/jobs/{id}", "code": "200"}, 3}},
		"escapes": {`b{le="+Inf",x="q\"uote"} 2.5e-05`, sample{"b", map[string]string{"le": "+Inf", "x": `q"uote`}, 2.5e-05}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseSample(tc.line)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(sample{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
