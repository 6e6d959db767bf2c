package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/model"
)

// heldBackend holds every submission until release is closed: a commit
// group that does not come back (a flooded or stalled store).
type heldBackend struct {
	api.Backend
	entered chan struct{} // one value per submission that reached the store
	release chan struct{}
	once    sync.Once
	holds   atomic.Bool
}

// letGo stops holding submissions and lets the held ones through.
func (b *heldBackend) letGo() {
	b.once.Do(func() {
		b.holds.Store(false)
		close(b.release)
	})
}

func (b *heldBackend) Submit(ctx context.Context, s model.Submission) (*model.Job, bool, error) {
	if b.holds.Load() {
		b.entered <- struct{}{}
		<-b.release
	}
	return b.Backend.Submit(ctx, s)
}

// newHeldEnv is a server allowing limit writes in flight whose
// submissions are held until letGo (at the latest when the test ends,
// before the server stops, so that a failing test does not hang).
func newHeldEnv(t *testing.T, limit int) (*heldBackend, *testEnv) {
	h := &heldBackend{entered: make(chan struct{}, 1024), release: make(chan struct{})}
	h.holds.Store(true)
	e := newEnv(t, envConfig{MaxInflightWrites: limit, Backend: func(c api.Backend) api.Backend { h.Backend = c; return h }})
	t.Cleanup(h.letGo)
	return h, e
}

// send is do for a goroutine of the test's: it reports a failed
// request as a status 0 reply rather than failing the test.
func (e *testEnv) send(r req) reply {
	hr, err := http.NewRequest(r.Method, e.http.URL+r.Path, bytes.NewReader(r.Body))
	if err != nil {
		return reply{Body: []byte(err.Error())}
	}
	hr.Header.Set("Authorization", "Bearer "+r.Token)
	for k, v := range r.Header {
		hr.Header.Set(k, v)
	}
	resp, err := e.http.Client().Do(hr)
	if err != nil {
		return reply{Body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// shedCount reads gpufleet_http_shed_total for route.
func (e *testEnv) shedCount(tb testing.TB, route string) float64 {
	tb.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gpufleet_http_shed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == route {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestSubmissionFloodIsShedAndAgentsAreNot: with its writes in flight held
// at the commit, the server answers further submissions 503 with
// Retry-After at once (and counts them), while an agent's registration and
// sync, and reads, are answered as usual; the shed submissions left no job,
// and once the commit comes back the held ones complete.
func TestSubmissionFloodIsShedAndAgentsAreNot(t *testing.T) {
	t.Parallel()
	const limit, flood = 4, 24
	held, e := newHeldEnv(t, limit)
	_, agent := e.token(t, model.TokenRequest{Kind: model.TokenAgent, Subject: "node-busy"})

	codes := make(chan reply, flood)
	var wg sync.WaitGroup
	for i := range flood {
		wg.Go(func() {
			codes <- e.send(req{Method: "POST", Path: "/v1/jobs", Token: e.admin,
				Header: map[string]string{"Content-Type": "application/json", api.IdempotencyHeader: fmt.Sprintf("flood-%d", i)},
				Body:   jobManifest(fmt.Sprintf("flood-%d", i))})
		})
	}
	// The limit's worth reach the store and stay there; every other one
	// is answered without waiting for them.
	for range limit {
		<-held.entered
	}
	shed := 0
	for range flood - limit {
		var r reply
		select {
		case r = <-codes:
		case <-time.After(30 * time.Second):
			t.Fatalf("submissions beyond the limit of %d wait for the held ones instead of being shed", limit)
		}
		if r.Status != http.StatusServiceUnavailable {
			t.Fatalf("a submission beyond the limit: status %d, want 503; body %s", r.Status, r.Body)
		}
		if ra := r.Header.Get("Retry-After"); ra != "1" {
			t.Errorf("Retry-After = %q, want 1", ra)
		}
		if p := problem(t, r); !strings.Contains(p.Detail, "busy") || !strings.Contains(p.Detail, "--max-inflight-writes") {
			t.Errorf("detail %q does not say the server is busy and which flag bounds it", p.Detail)
		}
		shed++
	}
	if got := e.shedCount(t, "POST /v1/jobs"); got != float64(shed) {
		t.Errorf("gpufleet_http_shed_total{route=\"POST /v1/jobs\"} = %v, want %d", got, shed)
	}

	// The writes are still held: agents and readers are served anyway.
	body := func(v any) []byte { b, _ := json.Marshal(v); return b }
	if r := e.do(t, req{Method: "POST", Path: "/v1/agent/register", Token: agent, Body: body(agentapi.Registration{Name: "busy", Provider: "static"})}); r.Status != http.StatusOK {
		t.Fatalf("agent registration during the flood: %d %s", r.Status, r.Body)
	}
	if r := e.do(t, req{Method: "POST", Path: "/v1/agent/sync", Token: agent, Body: body(agentapi.SyncRequest{NodeID: "node-busy"})}); r.Status != http.StatusOK {
		t.Fatalf("agent sync during the flood: %d %s", r.Status, r.Body)
	}
	if r := e.do(t, req{Method: "GET", Path: "/v1/jobs", Token: e.admin}); r.Status != http.StatusOK {
		t.Fatalf("listing jobs during the flood: %d %s", r.Status, r.Body)
	}
	if len(held.entered) != 0 {
		t.Fatalf("%d shed submissions reached the store", len(held.entered))
	}

	held.letGo()
	wg.Wait()
	for range limit {
		if r := <-codes; r.Status != http.StatusCreated {
			t.Errorf("a held submission: status %d, want 201; body %s", r.Status, r.Body)
		}
	}
	if n := len(e.listJobs(t, e.admin, "?state="+allStates())); n != limit {
		t.Errorf("%d jobs exist, want the %d admitted (a shed submission made none)", n, limit)
	}
	// The slots came back: a submission now goes through.
	e.submit(t, jobManifest("after"))
}

// TestClientWaitsOutABusyServer: the API client answered 503 with
// Retry-After tells its OnBusy hook, waits, and sends the submission again
// under the same idempotency key; it succeeds once the server has room,
// and exactly one job exists for the key.
func TestClientWaitsOutABusyServer(t *testing.T) {
	t.Parallel()
	held, e := newHeldEnv(t, 1)
	// The one slot is taken by a submission held at the commit.
	first := make(chan reply, 1)
	go func() {
		first <- e.send(req{Method: "POST", Path: "/v1/jobs", Token: e.admin, Header: map[string]string{"Content-Type": "application/json"}, Body: jobManifest("holder")})
	}()
	<-held.entered

	c := client.New(e.http.URL, e.admin, nil)
	var busy []client.Busy
	c.OnBusy(func(b client.Busy) {
		busy = append(busy, b)
		if b.Try == 2 { // shed twice: let the held commit through
			held.letGo()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := c.SubmitJob(ctx, jobManifest("patient"), client.SubmitOptions{IdempotencyKey: "patient-1"})
	if err != nil {
		t.Fatalf("submitting through a busy server: %v (waits %+v)", err, busy)
	}
	if len(busy) < 2 {
		t.Fatalf("OnBusy saw %d waits, want at least 2", len(busy))
	}
	for _, b := range busy {
		if b.Status != http.StatusServiceUnavailable || b.Method != "POST" || b.Path != "/v1/jobs" || b.Wait < time.Second {
			t.Errorf("busy wait %+v: want a 503 on POST /v1/jobs waited at least its Retry-After (1s)", b)
		}
	}
	if r := <-first; r.Status != http.StatusCreated {
		t.Fatalf("the held submission: %d %s", r.Status, r.Body)
	}
	jobs := e.listJobs(t, e.admin, "?state="+allStates())
	named := 0
	for _, j := range jobs {
		if j.Name == "patient" {
			named++
			if j.ID != v.ID {
				t.Errorf("job %s named patient, but the client was given %s", j.ID, v.ID)
			}
		}
	}
	if named != 1 || len(jobs) != 2 {
		t.Errorf("%d jobs, %d of them the retried one; want 2 and 1", len(jobs), named)
	}
	again, err := c.SubmitJob(ctx, jobManifest("patient"), client.SubmitOptions{IdempotencyKey: "patient-1"})
	if err != nil || again.ID != v.ID {
		t.Errorf("resubmitting the key: %v, %v; want job %s", again, err, v.ID)
	}
}

// TestClientGivesUpWithinItsBound: a server busy for longer than the
// client's bound gets the 503 problem back, not an endless wait.
func TestClientGivesUpWithinItsBound(t *testing.T) {
	t.Parallel()
	held, e := newHeldEnv(t, 1)
	go e.send(req{Method: "POST", Path: "/v1/jobs", Token: e.admin, Header: map[string]string{"Content-Type": "application/json"}, Body: jobManifest("holder")})
	<-held.entered

	c := client.New(e.http.URL, e.admin, nil)
	c.SetBusyWait(3 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := c.SubmitJob(ctx, jobManifest("impatient"), client.SubmitOptions{IdempotencyKey: "impatient-1"})
	if client.StatusOf(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("err = %v, want the server's 503 saying it is busy", err)
	}
}
