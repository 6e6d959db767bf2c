package services

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestServiceHostsAreValidated(t *testing.T) {
	for name, tc := range map[string]struct {
		hosts []string
		want  []string // field paths with a problem
	}{
		"exact and wildcard":  {hosts: []string{"chat.example.com", "*.chat.example.com", "a-1.b2.example.io"}},
		"upper case":          {hosts: []string{"Chat.example.com"}, want: []string{"spec.hosts[0]"}},
		"port":                {hosts: []string{"ok.example.com", "chat.example.com:443"}, want: []string{"spec.hosts[1]"}},
		"scheme":              {hosts: []string{"https://chat.example.com"}, want: []string{"spec.hosts[0]"}},
		"one label":           {hosts: []string{"localhost"}, want: []string{"spec.hosts[0]"}},
		"star inside":         {hosts: []string{"a.*.example.com"}, want: []string{"spec.hosts[0]"}},
		"bare wildcard":       {hosts: []string{"*.com", "*"}, want: []string{"spec.hosts[0]", "spec.hosts[1]"}},
		"hyphen at an end":    {hosts: []string{"-chat.example.com"}, want: []string{"spec.hosts[0]"}},
		"empty label":         {hosts: []string{"chat..example.com"}, want: []string{"spec.hosts[0]"}},
		"underscore":          {hosts: []string{"my_chat.example.com"}, want: []string{"spec.hosts[0]"}},
		"named twice":         {hosts: []string{"chat.example.com", "chat.example.com"}, want: []string{"spec.hosts[1]"}},
		"label over 63 chars": {hosts: []string{strings.Repeat("a", 64) + ".example.com"}, want: []string{"spec.hosts[0]"}},
	} {
		t.Run(name, func(t *testing.T) {
			s := testService(t, "chat", 1, 1)
			s.Spec.Hosts = tc.hosts
			var got []string
			for _, e := range s.Spec.Validate("spec", func(string) bool { return true }) {
				got = append(got, e.Path)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("problems at %v, want %v: %v", got, tc.want, s.Spec.Validate("spec", func(string) bool { return true }))
			}
		})
	}
}

func hostTable() model.ProxyTable {
	return model.ProxyTable{Version: 1, Domain: "svc.example.com", Services: []model.ProxyRoute{
		{Name: "chat", Auth: model.ServiceAuth{Mode: model.AuthPublic}, Hosts: []string{"chat.example.com", "*.chat.example.com"}},
		{Name: "pinned", Auth: model.ServiceAuth{Mode: model.AuthPublic}, Hosts: []string{"eu.chat.example.com"}},
		{Name: "embed", Auth: model.ServiceAuth{Mode: model.AuthPublic}},
	}}
}

func TestHostRouting(t *testing.T) {
	p := NewProxy(ProxyConfig{Reserved: []string{"api.svc.example.com"}})
	p.Set(hostTable())
	for host, want := range map[string]string{
		"chat.example.com":         "chat",
		"CHAT.example.com:8443":    "chat",   // case and port do not matter
		"chat.example.com.":        "chat",   // nor a trailing dot
		"us.chat.example.com":      "chat",   // the wildcard
		"eu.chat.example.com":      "pinned", // an exact host beats a wildcard
		"a.b.chat.example.com":     "",       // a wildcard stands for one label
		"embed.svc.example.com":    "embed",  // the services domain
		"chat.svc.example.com":     "chat",
		"nothing.svc.example.com":  "", // no such service: the API serves it (404)
		"api.svc.example.com":      "", // reserved: the API's own host
		"x.embed.svc.example.com":  "",
		"svc.example.com":          "",
		"gpufleet.example.com":     "",
		"127.0.0.1:7777":           "",
		"[::1]:7777":               "",
		"":                         "",
		"embed.other.example.com":  "",
		"embed.svc.example.com:80": "embed",
	} {
		got, ok := p.Host(host)
		if got != want || ok != (want != "") {
			t.Errorf("Host(%q) = %q, %v; want %q", host, got, ok, want)
		}
	}
}

// TestHostAndPathRoutesReachTheReplica: a request on a service's host
// reaches its replica with the whole path; /services/NAME/… keeps working;
// another host falls through to the API.
func TestHostAndPathRoutesReachTheReplica(t *testing.T) {
	f := newFake(t)
	m, _, _ := startManager(t, f)
	s := testService(t, "chat", 1, 1)
	s.Trusted = true // an admin's: a host outside any services domain
	s.Spec.Hosts = []string{"chat.example.com"}
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a ready replica", func() bool { st, _ := m.Get("chat"); return st.Ready == 1 })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.ServeRoute(w, r, nil) {
			http.Error(w, "the API", http.StatusTeapot)
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		host, path string
		code       int
		has        string
	}{
		{"chat.example.com", "/v1/completions", 200, `"path":"/v1/completions"`},
		{"chat.example.com", "/services/chat/v1/completions", 200, `"path":"/services/chat/v1/completions"`}, // the whole path is the service's
		{"gpufleet.example.com", "/services/chat/v1/completions", 200, `"path":"/v1/completions"`},
		{"gpufleet.example.com", "/v1/completions", http.StatusTeapot, "the API"},
	} {
		req, _ := http.NewRequest("POST", srv.URL+tc.path, strings.NewReader(`{"prompt":"hi"}`))
		req.Host = tc.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.has) {
			t.Errorf("%s%s: %d %s", tc.host, tc.path, resp.StatusCode, b)
		}
	}
}

func TestHostConflictsAreRefusedAtApply(t *testing.T) {
	f := newFake(t)
	m, err := New(Config{Controller: f, Committer: memCommitter{}, Domain: "svc.example.com", Reserved: []string{"gpufleet.example.com", "api.example.org"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := testService(t, "a", 1, 1)
	a.Trusted = true // an admin's: hosts outside the services domain
	a.Spec.Hosts = []string{"chat.example.com", "*.chat.example.com", "a.svc.example.com"}
	if _, _, err := m.Apply(ctx, a); err != nil {
		t.Fatalf("a service's own NAME.DOMAIN and free hosts: %v", err)
	}
	for name, tc := range map[string]struct {
		hosts  []string
		want   []string
		tenant bool // applied by a non-admin
	}{
		"a tenant under the domain":   {hosts: []string{"b.svc.example.com", "x.b.svc.example.com", "*.b.svc.example.com"}, tenant: true},
		"a tenant outside the domain": {hosts: []string{"b.svc.example.com", "b.example.com"}, want: []string{"spec.hosts[1]"}, tenant: true},
		"a tenant under another's name": {hosts: []string{"b.svc.example.com", "x.c.svc.example.com", "*.c.svc.example.com", "x.ab.svc.example.com"},
			want: []string{"spec.hosts[1]", "spec.hosts[2]", "spec.hosts[3]"}, tenant: true},
		"another's exact host":  {hosts: []string{"free.example.com", "chat.example.com"}, want: []string{"spec.hosts[1]"}},
		"another's wildcard":    {hosts: []string{"*.chat.example.com"}, want: []string{"spec.hosts[0]"}},
		"another's domain name": {hosts: []string{"a.svc.example.com"}, want: []string{"spec.hosts[0]"}},
		"the domain's wildcard": {hosts: []string{"*.svc.example.com"}, want: []string{"spec.hosts[0]"}},
		"the API's host":        {hosts: []string{"gpufleet.example.com"}, want: []string{"spec.hosts[0]"}},
		"below the API's host":  {hosts: []string{"*.gpufleet.example.com"}},
		"over the API's host":   {hosts: []string{"*.example.org"}, want: []string{"spec.hosts[0]"}},
	} {
		t.Run(name, func(t *testing.T) {
			b := testService(t, "b", 1, 1)
			b.Trusted = !tc.tenant
			b.Spec.Hosts = tc.hosts
			_, _, err := m.Apply(ctx, b)
			var fe model.FieldErrors
			errors.As(err, &fe)
			var got []string
			for _, e := range fe {
				got = append(got, e.Path)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") || (err != nil) != (len(tc.want) > 0) {
				t.Fatalf("problems at %v (%v), want %v", got, err, tc.want)
			}
			if err == nil {
				if err := m.Delete(ctx, "b"); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	// A service may keep its own hosts when it is applied again.
	if _, _, err := m.Apply(ctx, a); err != nil {
		t.Fatalf("re-applying: %v", err)
	}
	if got, _ := m.proxy.Host("x.chat.example.com"); got != "a" {
		t.Fatalf("the wildcard routes to %q", got)
	}
}

// TestDecisionsSurviveARestart: the autoscaler's decisions are stored with
// the service, so a server built again from the store shows them.
func TestDecisionsSurviveARestart(t *testing.T) {
	f := newFake(t)
	path := filepath.Join(t.TempDir(), "gpufleet.db")
	m, st := storedManager(t, f, path, Config{Interval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	s := testService(t, "kept", 0, 2)
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.Proxy(w, r, "kept", r.URL.Path, nil) }))
	defer srv.Close()
	if code, body := get(t, srv.URL+"/v1/completions"); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	before, _ := m.Get("kept")
	if len(before.Decisions) == 0 || before.Decisions[0].Fields["to"] != "1" {
		t.Fatalf("no scale-from-zero decision: %+v", before.Decisions)
	}
	cancel()
	<-done
	st.Close()
	m2, _ := storedManager(t, f, path, Config{})
	after, _ := m2.Get("kept")
	if len(after.Decisions) < len(before.Decisions) || after.Decisions[0].Message != before.Decisions[0].Message {
		t.Fatalf("after a restart: %+v, before %+v", after.Decisions, before.Decisions)
	}
	// At most MaxServiceDecisions are kept.
	m2.mu.Lock()
	e := m2.svcs["kept"]
	for i := range 2 * model.MaxServiceDecisions {
		e.scaler = NewAutoscaler(model.ServiceSpec{Replicas: model.ServiceReplicas{Min: 0, Max: 2, Target: i%2 + 1}})
		m2.planLocked(e, time.Now())
	}
	n := len(e.svc.Decisions)
	m2.mu.Unlock()
	if n != model.MaxServiceDecisions {
		t.Fatalf("%d decisions kept, want %d", n, model.MaxServiceDecisions)
	}
}
