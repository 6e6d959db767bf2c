package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/notifications"
)

// hookSink is a local webhook receiver: it verifies each post's signature
// and keeps the bodies by path.
type hookSink struct {
	t      *testing.T
	secret []byte
	mu     sync.Mutex
	bodies map[string][][]byte
}

func (s *hookSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if !Verify(s.secret, body, r.Header.Get(HeaderSignature)) || r.Header.Get(HeaderNotificationID) == "" {
		s.t.Errorf("%s: bad signature or no id", r.URL.Path)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	s.mu.Lock()
	s.bodies[r.URL.Path] = append(s.bodies[r.URL.Path], body)
	s.mu.Unlock()
}

func (s *hookSink) got(path string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[path]
}

// Notification documents route job events through the outbox: a Slack
// document scoped to project nlp gets its job's success as blocks, a Teams
// one its stuck-queued job as a MessageCard, once, even across a restart
// between the firing and its delivery; a document scoped to another
// project gets nothing.
func TestNotificationDocuments(t *testing.T) {
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "gpufleet.db")
	sink := &hookSink{t: t, secret: []byte("server-webhook-key"), bodies: map[string][][]byte{}}
	srv := httptest.NewServer(sink)
	defer srv.Close()
	withKey := func(c *Config) { c.Cost.WebhookSecret = sink.secret }
	h, shutdown, err := startSQLiteController(t, dbPath, withKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"SLACK": "/slack", "TEAMS": "/teams", "JSON": "/json"} {
		if _, err := h.c.Vault().PutSecret(ctx, "ops", name, []byte(srv.URL+path)); err != nil {
			t.Fatal(err)
		}
	}
	note := func(name, format, project string, stuck time.Duration, events ...string) manifest.Notification {
		return manifest.Notification{APIVersion: manifest.APIVersion, Kind: manifest.KindNotification, Metadata: manifest.ObjectMeta{Name: name},
			Spec: manifest.NotificationSpec{Scope: model.BudgetScope{Project: project}, Events: events, StuckAfter: model.Duration(stuck),
				Format: format, Receiver: &manifest.WebhookRef{SecretRef: model.SecretRef("ops/" + strings.ToUpper(format))}}}
	}
	set := &manifest.Set{Notifications: []manifest.Notification{
		note("nlp-slack", manifest.FormatSlack, "nlp", 0, manifest.EventSucceeded, manifest.EventFailed),
		note("nlp-teams", manifest.FormatTeams, "nlp", 10*time.Minute, manifest.EventStuckQueued),
		note("vision-json", manifest.FormatJSON, "vision", 10*time.Minute, manifest.EventSucceeded, manifest.EventStuckQueued),
	}}
	// A receiver naming a secret the server does not hold is refused.
	bad := &manifest.Set{Notifications: []manifest.Notification{note("x", "nope", "", 0, manifest.EventFailed)}}
	if _, err := h.c.ApplyFleet(ctx, bad, ApplyOptions{Author: "t"}); err == nil || !strings.Contains(err.Error(), "Notification/x: spec.receiver.secretRef: project ops has no secret NOPE") {
		t.Fatalf("apply naming a missing secret: %v", err)
	}
	if _, err := h.c.ApplyFleet(ctx, set, ApplyOptions{Author: "t"}); err != nil {
		t.Fatal(err)
	}
	// A secret a Notification's receiver names cannot be deleted.
	if err := h.c.Vault().DeleteSecret(ctx, "ops", "TEAMS"); !errors.Is(err, ErrConflict) {
		t.Fatalf("deleting a receiver's secret: %v, want ErrConflict", err)
	}

	h.registerNode("own", 2, model.Owned)
	h.node = "own"
	submit := func(project string, gpus float64) *model.Job {
		spec := model.JobSpec{Resources: model.Resources{GPUs: gpus}, Run: model.RunSpec{Command: []string{"true"}}}
		spec.Default()
		j, _, err := h.c.Submit(ctx, Submission{Project: project, User: "u", Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	a := submit("nlp", 1)
	replica := h.waitDesired(1).Replicas[0].ID
	h.sync(running(replica))
	h.waitJob(a.ID, model.JobRunning)
	b := submit("nlp", 2)    // waits: one GPU is free
	c := submit("vision", 2) // so does this one, out of the Teams scope
	h.await()

	h.clk.Advance(9 * time.Minute)
	if err := h.c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	if n := h.c.outbox.Len(); n != 0 {
		t.Fatalf("%d notifications after 9 minutes, want none", n)
	}
	h.clk.Advance(2 * time.Minute)
	if err := h.c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	stuckB := "notification/nlp-teams/job/" + b.ID + "/stuck/"
	stuckC := "notification/vision-json/job/" + c.ID + "/stuck/"
	if n := h.c.outbox.Len(); n != 2 {
		t.Fatalf("%d notifications after 11 minutes, want 2 (b to Teams, c to JSON)", n)
	}
	// Crash before delivery: the notification and the fact that it fired
	// are durable together.
	shutdown()
	h, _, err = startSQLiteController(t, dbPath, withKey)
	if err != nil {
		t.Fatal(err)
	}
	h.node = "own"
	h.clk.Advance(30 * time.Minute)
	if err := h.c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	if n := h.c.outbox.Len(); n != 2 {
		t.Fatalf("%d notifications after the restart, want the same 2", n)
	}
	h.c.deliverDue(ctx)
	teams := sink.got("/teams")
	if len(teams) != 1 {
		t.Fatalf("teams got %d posts, want 1", len(teams))
	}
	var card struct {
		Type     string `json:"@type"`
		Context  string `json:"@context"`
		Summary  string `json:"summary"`
		Title    string `json:"title"`
		Sections []struct {
			Facts []notifications.Fact `json:"facts"`
		} `json:"sections"`
	}
	if err := json.Unmarshal(teams[0], &card); err != nil {
		t.Fatal(err)
	}
	if card.Type != "MessageCard" || card.Context != "https://schema.org/extensions" || !strings.Contains(card.Summary, b.ID+" has waited queued") ||
		card.Title != card.Summary || len(card.Sections) != 1 || len(card.Sections[0].Facts) < 3 || card.Sections[0].Facts[0] != (notifications.Fact{Name: "Job", Value: b.ID}) {
		t.Errorf("teams card %s", teams[0])
	}
	var generic notifications.GenericBody
	if js := sink.got("/json"); len(js) != 1 || json.Unmarshal(js[0], &generic) != nil || !strings.HasPrefix(generic.ID, stuckC) ||
		generic.Event != manifest.EventStuckQueued || generic.Project != "vision" {
		t.Errorf("json receiver got %q, want c's stuck-queued", js)
	}
	if !strings.HasPrefix(generic.ID, stuckC) || strings.HasPrefix(stuckB, stuckC) {
		t.Errorf("ids %q and %q", generic.ID, stuckB)
	}

	// a succeeds: Slack gets it as blocks; vision's document does not.
	h.sync(exited(replica, 0, ""))
	h.waitJob(a.ID, model.JobSucceeded)
	h.c.deliverDue(ctx)
	sl := sink.got("/slack")
	if len(sl) != 1 {
		t.Fatalf("slack got %d posts, want 1", len(sl))
	}
	var msg struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
			Text struct{ Type, Text string }
		} `json:"blocks"`
	}
	if err := json.Unmarshal(sl[0], &msg); err != nil {
		t.Fatal(err)
	}
	if len(msg.Blocks) == 0 || msg.Blocks[0].Type != "section" || msg.Blocks[0].Text.Type != "mrkdwn" ||
		msg.Blocks[0].Text.Text != "*Job "+a.ID+" succeeded*" || msg.Text != "Job "+a.ID+" succeeded" {
		t.Errorf("slack message %s", sl[0])
	}
	if n := len(sink.got("/json")); n != 1 {
		t.Errorf("json receiver got %d posts, want only c's stuck-queued", n)
	}

	// The next job placed (b or c) fails: Slack hears of b's failure
	// only, with its exit code.
	next := h.waitDesired(1).Replicas[0]
	h.sync(running(next.ID))
	h.sync(exited(next.ID, 3, "boom"))
	h.waitJob(next.JobID, model.JobFailed)
	h.c.deliverDue(ctx)
	wantSlack := 1
	t.Logf("placed next: %s (b is %s)", next.JobID, b.ID)
	if next.JobID == b.ID {
		wantSlack = 2
	}
	sl = sink.got("/slack")
	if len(sl) != wantSlack {
		t.Fatalf("slack got %d posts after %s failed, want %d", len(sl), next.JobID, wantSlack)
	}
	if wantSlack == 2 {
		if !bytes.Contains(sl[1], []byte(`"*Job `+b.ID+` failed*`)) || !bytes.Contains(sl[1], []byte(`*Exit code*\n3`)) {
			t.Errorf("slack failure message %s", sl[1])
		}
	}
	// Delivered, stuck-queued does not fire again for the same wait.
	h.clk.Advance(time.Hour)
	if err := h.c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	if n := h.c.outbox.Len(); n != 0 {
		t.Errorf("%d notifications still wait", n)
	}
}
