package notifications

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Kind is the outbox kind of every notification this package makes.
const Kind = "notification"

// Event is one thing that happened, described for people.
type Event struct {
	// ID names the occurrence, stable across retries and restarts
	// ("job/ID/attempt/3/failed"): the notification ids derive from it.
	ID string
	// Kind is one of manifest.NotificationEvents.
	Kind string
	Time time.Time
	// Job, Project, Queue and Tags are what scopes match against; a
	// budget firing sets its scope's project, queue and tags, an alert
	// its job's.
	Job     string
	Project string
	Queue   string
	Tags    map[string]string
	// Title is one line; Text may be longer.
	Title string
	Text  string
	// Facts are name/value pairs shown as a table, in order.
	Facts []Fact
}

// Fact is one name/value pair of an Event.
type Fact struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Delivery is one body to post: its stable id, the document it is for,
// the secrets naming its receiver and signing key, and the body.
type Delivery struct {
	ID           string
	Notification string
	URLRef       string
	KeyRef       string
	Body         []byte
}

// Matches reports whether d wants ev: the event is subscribed and the
// scope holds ev's job (or, for a budget, its scope).
func Matches(d *manifest.Notification, ev Event) bool {
	if !d.Spec.Wants(ev.Kind) {
		return false
	}
	s := d.Spec.Scope
	if ev.Kind == manifest.EventBudget {
		// A budget is in scope when it is about the scope's project (or
		// the scope has none), whatever its own queue and tags.
		return s.Project == "" || s.Project == ev.Project
	}
	return s.Matches(ev.Project, ev.Queue, ev.Tags)
}

// Render returns the deliveries ev makes under docs, in docs' order.
func Render(docs []manifest.Notification, ev Event) []Delivery {
	var out []Delivery
	for i := range docs {
		d := &docs[i]
		if !Matches(d, ev) {
			continue
		}
		id := "notification/" + d.Metadata.Name + "/" + ev.ID
		var ref, key string
		if d.Spec.Receiver != nil {
			ref, key = string(d.Spec.Receiver.SecretRef), string(d.Spec.Receiver.SigningKeyRef)
		}
		out = append(out, Delivery{ID: id, Notification: d.Metadata.Name, URLRef: ref, KeyRef: key,
			Body: Body(d.Spec.FormatOrDefault(), id, d.Metadata.Name, ev)})
	}
	return out
}

// Body renders ev in format (manifest.FormatJSON, FormatSlack or
// FormatTeams) as notification id of document name.
func Body(format, id, name string, ev Event) []byte {
	var v any
	switch format {
	case manifest.FormatSlack:
		v = slack(ev)
	case manifest.FormatTeams:
		v = teams(ev)
	default:
		v = generic(id, name, ev)
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("notifications: encoding a body: %v", err)) // strings only
	}
	return b
}

// GenericBody is the gpufleet JSON format.
type GenericBody struct {
	ID           string            `json:"id"`
	Kind         string            `json:"kind"` // Kind
	Notification string            `json:"notification"`
	Event        string            `json:"event"`
	Time         time.Time         `json:"time"`
	Job          string            `json:"job,omitempty"`
	Project      string            `json:"project,omitempty"`
	Queue        string            `json:"queue,omitempty"`
	Tags         map[string]string `json:"tags,omitempty"`
	Title        string            `json:"title"`
	Text         string            `json:"text,omitempty"`
	Facts        []Fact            `json:"facts,omitempty"`
}

func generic(id, name string, ev Event) GenericBody {
	return GenericBody{ID: id, Kind: Kind, Notification: name, Event: ev.Kind, Time: ev.Time.UTC(), Job: ev.Job,
		Project: ev.Project, Queue: ev.Queue, Tags: ev.Tags, Title: ev.Title, Text: ev.Text, Facts: ev.Facts}
}

// Slack incoming-webhook message: a fallback "text" (shown in
// notifications) and Block Kit "blocks": a header-like section in mrkdwn,
// a section of fields, and a context line. Formats are documented at
// https://api.slack.com/messaging/webhooks and
// https://api.slack.com/reference/block-kit/blocks (section: "text" or
// "fields" of text objects {"type": "mrkdwn", "text": ...}; at most 10
// fields of 2000 characters, text at most 3000).
type slackMessage struct {
	Text   string       `json:"text"`
	Blocks []slackBlock `json:"blocks"`
}

type slackBlock struct {
	Type     string      `json:"type"`
	Text     *slackText  `json:"text,omitempty"`
	Fields   []slackText `json:"fields,omitempty"`
	Elements []slackText `json:"elements,omitempty"`
}

type slackText struct {
	Type string `json:"type"` // "mrkdwn"
	Text string `json:"text"`
}

// slackEscape escapes the three characters Slack's mrkdwn reserves
// (https://api.slack.com/reference/surfaces/formatting#escaping).
var slackEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func slack(ev Event) slackMessage {
	text := "*" + slackEscape.Replace(ev.Title) + "*"
	if ev.Text != "" {
		text += "\n" + slackEscape.Replace(ev.Text)
	}
	m := slackMessage{Text: ev.Title, Blocks: []slackBlock{{Type: "section", Text: &slackText{Type: "mrkdwn", Text: clip(text, 3000)}}}}
	var fields []slackText
	for _, f := range facts(ev) {
		if len(fields) == 10 {
			break
		}
		fields = append(fields, slackText{Type: "mrkdwn", Text: clip("*"+slackEscape.Replace(f.Name)+"*\n"+slackEscape.Replace(f.Value), 2000)})
	}
	if len(fields) > 0 {
		m.Blocks = append(m.Blocks, slackBlock{Type: "section", Fields: fields})
	}
	m.Blocks = append(m.Blocks, slackBlock{Type: "context", Elements: []slackText{{Type: "mrkdwn",
		Text: "gpufleet · " + ev.Kind + " · " + ev.Time.UTC().Format(time.RFC3339)}}})
	return m
}

// Microsoft Teams incoming-webhook MessageCard (the legacy actionable
// message card that Teams incoming webhooks and Workflows accept), as
// documented at
// https://learn.microsoft.com/en-us/outlook/actionable-messages/message-card-reference
// and
// https://learn.microsoft.com/en-us/microsoftteams/platform/webhooks-and-connectors/how-to/connectors-using#send-a-message-through-incoming-webhook
// "@type": "MessageCard", "@context": "https://schema.org/extensions",
// "summary" (required when there is no text), "themeColor" (hex, no #),
// "title", "text", and "sections" with "facts" of {"name", "value"}.
type teamsCard struct {
	Type       string         `json:"@type"`
	Context    string         `json:"@context"`
	Summary    string         `json:"summary"`
	ThemeColor string         `json:"themeColor"`
	Title      string         `json:"title"`
	Text       string         `json:"text,omitempty"`
	Sections   []teamsSection `json:"sections,omitempty"`
}

type teamsSection struct {
	ActivityTitle string `json:"activityTitle,omitempty"`
	Facts         []Fact `json:"facts,omitempty"`
	Markdown      bool   `json:"markdown"`
}

func teams(ev Event) teamsCard {
	color := "0076D7"
	switch ev.Kind {
	case manifest.EventSucceeded:
		color = "2EB67D"
	case manifest.EventFailed, manifest.EventAlert:
		color = "E01E5A"
	case manifest.EventPreempted, manifest.EventStuckQueued, manifest.EventBudget:
		color = "ECB22E"
	}
	return teamsCard{Type: "MessageCard", Context: "https://schema.org/extensions", Summary: ev.Title, ThemeColor: color,
		Title: ev.Title, Text: ev.Text, Sections: []teamsSection{{ActivityTitle: "gpufleet · " + ev.Kind + " · " + ev.Time.UTC().Format(time.RFC3339),
			Facts: facts(ev), Markdown: true}}}
}

// facts are ev's facts after its job, project and queue.
func facts(ev Event) []Fact {
	var out []Fact
	for _, f := range []Fact{{"Job", ev.Job}, {"Project", ev.Project}, {"Queue", ev.Queue}} {
		if f.Value != "" {
			out = append(out, f)
		}
	}
	out = append(out, ev.Facts...)
	for _, k := range slices.Sorted(maps.Keys(ev.Tags)) {
		out = append(out, Fact{"tag " + k, ev.Tags[k]})
	}
	return out
}

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n-3]
	for len(s) > 0 && !utf8Start(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[len(s)-1] >= 0x80 {
		s = s[:len(s)-1]
	}
	return s + "..."
}

func utf8Start(b byte) bool { return b < 0x80 || b >= 0xC0 }

// StuckKey is what a job records once stuck-queued fired for document
// name in its queued spell that began at enqueued, so it fires once.
func StuckKey(name string, enqueued time.Time) string {
	return name + "@" + enqueued.UTC().Format(time.RFC3339Nano)
}

// StuckDue returns the documents whose stuck-queued fires now for queued
// job j: subscribed, in scope, waited past stuckAfter, and not fired yet
// in this spell (j.NotifiedStuck).
func StuckDue(docs []manifest.Notification, j *model.Job, now time.Time) []*manifest.Notification {
	if j.State != model.JobQueued {
		return nil
	}
	var out []*manifest.Notification
	for i := range docs {
		d := &docs[i]
		ev := Event{Kind: manifest.EventStuckQueued, Project: j.Project, Queue: j.Spec.Queue, Tags: j.Tags}
		if !Matches(d, ev) || now.Sub(j.EnqueuedAt) < d.Spec.StuckAfter.D() {
			continue
		}
		if slices.Contains(j.NotifiedStuck, StuckKey(d.Metadata.Name, j.EnqueuedAt)) {
			continue
		}
		out = append(out, d)
	}
	return out
}
