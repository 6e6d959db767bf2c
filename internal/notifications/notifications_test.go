package notifications

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

func doc(name, format string, scope model.BudgetScope, stuck time.Duration, events ...string) manifest.Notification {
	return manifest.Notification{APIVersion: manifest.APIVersion, Kind: manifest.KindNotification, Metadata: manifest.ObjectMeta{Name: name},
		Spec: manifest.NotificationSpec{Scope: scope, Events: events, StuckAfter: model.Duration(stuck), Format: format,
			Receiver: &manifest.WebhookRef{SecretRef: model.SecretRef("ops/HOOK_" + strings.ToUpper(name))}}}
}

var at = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func TestRenderScopes(t *testing.T) {
	docs := []manifest.Notification{
		doc("all-failures", "", model.BudgetScope{}, 0, manifest.EventFailed),
		doc("nlp", manifest.FormatSlack, model.BudgetScope{Project: "nlp"}, 0, manifest.EventFailed, manifest.EventSucceeded, manifest.EventBudget),
		doc("nlp-big", manifest.FormatTeams, model.BudgetScope{Project: "nlp", Queue: "big", Tags: map[string]string{"team": "x"}}, 0, manifest.EventFailed),
	}
	for _, tc := range []struct {
		name string
		ev   Event
		want []string
	}{
		{"failed in vision", Event{ID: "j1", Kind: manifest.EventFailed, Project: "vision"}, []string{"all-failures"}},
		{"failed in nlp", Event{ID: "j2", Kind: manifest.EventFailed, Project: "nlp", Queue: "big"}, []string{"all-failures", "nlp"}},
		{"failed in nlp with tags", Event{ID: "j3", Kind: manifest.EventFailed, Project: "nlp", Queue: "big", Tags: map[string]string{"team": "x", "a": "b"}},
			[]string{"all-failures", "nlp", "nlp-big"}},
		{"succeeded in vision", Event{ID: "j4", Kind: manifest.EventSucceeded, Project: "vision"}, nil},
		{"preempted in nlp", Event{ID: "j5", Kind: manifest.EventPreempted, Project: "nlp"}, nil},
		{"budget of nlp queue", Event{ID: "b", Kind: manifest.EventBudget, Project: "nlp", Queue: "q"}, []string{"nlp"}},
		{"budget of everything", Event{ID: "b", Kind: manifest.EventBudget}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, d := range Render(docs, tc.ev) {
				got = append(got, d.Notification)
				if want := "notification/" + d.Notification + "/" + tc.ev.ID; d.ID != want {
					t.Errorf("id %q, want %q", d.ID, want)
				}
				if d.URLRef != "ops/HOOK_"+strings.ToUpper(d.Notification) {
					t.Errorf("%s: urlRef %q", d.Notification, d.URLRef)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("matched %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFormats(t *testing.T) {
	ev := Event{ID: "job/j1/attempt/1/failed", Kind: manifest.EventFailed, Time: at, Job: "j1", Project: "nlp", Queue: "big",
		Tags: map[string]string{"team": "x"}, Title: "Job j1 failed", Text: "exit 3 <oom> & more",
		Facts: []Fact{{Name: "Exit code", Value: "3"}}}

	var g GenericBody
	if err := json.Unmarshal(Body(manifest.FormatJSON, "id1", "n", ev), &g); err != nil {
		t.Fatal(err)
	}
	if g.ID != "id1" || g.Kind != Kind || g.Event != "failed" || g.Job != "j1" || g.Notification != "n" || !g.Time.Equal(at) || len(g.Facts) != 1 {
		t.Errorf("generic body %+v", g)
	}

	var s struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
			Text *struct {
				Type, Text string
			} `json:"text"`
			Fields []struct {
				Type, Text string
			} `json:"fields"`
			Elements []struct {
				Type, Text string
			} `json:"elements"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(Body(manifest.FormatSlack, "id1", "n", ev), &s); err != nil {
		t.Fatal(err)
	}
	if s.Text != "Job j1 failed" || len(s.Blocks) != 3 {
		t.Fatalf("slack message %+v, want a fallback text and 3 blocks", s)
	}
	b0 := s.Blocks[0]
	if b0.Type != "section" || b0.Text == nil || b0.Text.Type != "mrkdwn" || b0.Text.Text != "*Job j1 failed*\nexit 3 &lt;oom&gt; &amp; more" {
		t.Errorf("slack first block %+v", b0)
	}
	if b := s.Blocks[1]; b.Type != "section" || len(b.Fields) != 5 || b.Fields[0].Type != "mrkdwn" || b.Fields[0].Text != "*Job*\nj1" ||
		b.Fields[3].Text != "*Exit code*\n3" || b.Fields[4].Text != "*tag team*\nx" {
		t.Errorf("slack fields block %+v", b)
	}
	if b := s.Blocks[2]; b.Type != "context" || len(b.Elements) != 1 || !strings.Contains(b.Elements[0].Text, "2026-12-02T10:00:00Z") {
		t.Errorf("slack context block %+v", b)
	}

	var m map[string]any
	if err := json.Unmarshal(Body(manifest.FormatTeams, "id1", "n", ev), &m); err != nil {
		t.Fatal(err)
	}
	if m["@type"] != "MessageCard" || m["@context"] != "https://schema.org/extensions" || m["summary"] != "Job j1 failed" ||
		m["title"] != "Job j1 failed" || m["themeColor"] != "E01E5A" {
		t.Errorf("teams card %v", m)
	}
	secs, _ := m["sections"].([]any)
	if len(secs) != 1 {
		t.Fatalf("teams sections %v", m["sections"])
	}
	facts, _ := secs[0].(map[string]any)["facts"].([]any)
	if len(facts) != 5 || facts[3].(map[string]any)["name"] != "Exit code" || facts[3].(map[string]any)["value"] != "3" {
		t.Errorf("teams facts %v", facts)
	}
}

func TestSlackClipsLongText(t *testing.T) {
	ev := Event{Kind: manifest.EventAlert, Title: "t", Text: strings.Repeat("é", 4000), Time: at}
	var s struct {
		Blocks []struct{ Text *struct{ Text string } }
	}
	if err := json.Unmarshal(Body(manifest.FormatSlack, "i", "n", ev), &s); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Blocks[0].Text.Text); n > 3000 || !strings.HasSuffix(s.Blocks[0].Text.Text, "é...") {
		t.Errorf("section text is %d bytes, ends %q", n, s.Blocks[0].Text.Text[n-8:])
	}
}

func TestStuckDue(t *testing.T) {
	docs := []manifest.Notification{
		doc("fast", "", model.BudgetScope{}, 10*time.Minute, manifest.EventStuckQueued),
		doc("slow", "", model.BudgetScope{Queue: "big"}, time.Hour, manifest.EventStuckQueued),
		doc("other", "", model.BudgetScope{}, 0, manifest.EventFailed),
	}
	j := &model.Job{ID: "j", State: model.JobQueued, Project: "p", EnqueuedAt: at, Spec: model.JobSpec{Queue: "big"}}
	names := func(now time.Time) string {
		var out []string
		for _, d := range StuckDue(docs, j, now) {
			out = append(out, d.Metadata.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names(at.Add(9 * time.Minute)); got != "" {
		t.Errorf("after 9m: %q", got)
	}
	if got := names(at.Add(10 * time.Minute)); got != "fast" {
		t.Errorf("after 10m: %q, want fast", got)
	}
	j.NotifiedStuck = []string{StuckKey("fast", at)}
	if got := names(at.Add(2 * time.Hour)); got != "slow" {
		t.Errorf("after 2h with fast fired: %q, want slow", got)
	}
	j.EnqueuedAt = at.Add(3 * time.Hour) // requeued: a new spell
	if got := names(at.Add(4 * time.Hour)); got != "fast,slow" {
		t.Errorf("a new spell: %q, want fast,slow", got)
	}
	j.State = model.JobRunning
	if got := names(at.Add(9 * time.Hour)); got != "" {
		t.Errorf("running: %q", got)
	}
}
