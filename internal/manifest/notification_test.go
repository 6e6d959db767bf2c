package manifest

import (
	"strings"
	"testing"
	"time"
)

func TestNotificationParse(t *testing.T) {
	src := `apiVersion: gpufleet.dev/v1
kind: Notification
metadata: {name: nlp-slack}
spec:
  scope: {project: nlp, tags: {team: search}}
  events: [succeeded, failed, stuck-queued]
  stuckAfter: 30m
  receiver: {secretRef: nlp/SLACK_HOOK}
  format: slack
`
	doc, fe := ParseDocument([]byte(src), YAML, Checks{})
	if len(fe) > 0 {
		t.Fatalf("problems: %v", fe)
	}
	n := doc.(*Notification)
	if n.Spec.StuckAfter.D() != 30*time.Minute || n.Spec.Receiver.SecretRef != "nlp/SLACK_HOOK" || !n.Spec.Wants(EventFailed) || n.Spec.Wants(EventBudget) {
		t.Errorf("parsed %+v", n.Spec)
	}
	set, fe := Parse([]Source{{Name: "n.yaml", Data: []byte(src), Format: YAML}}, Checks{})
	if len(fe) > 0 || len(set.Notifications) != 1 || set.Len() != 1 {
		t.Fatalf("set %+v, problems %v", set, fe)
	}
	docs, _ := set.Documents()
	back, err := ParseStored(docs)
	if err != nil || len(back.Notifications) != 1 || back.Notifications[0].Spec.Format != FormatSlack {
		t.Fatalf("stored round trip: %+v, %v", back, err)
	}
}

func TestNotificationProblems(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{`{events: [failed]}`, `spec.receiver: is required`},
		{`{events: [], receiver: {secretRef: a/B}}`, `spec.events: is required`},
		{`{events: [failed, sucess], receiver: {secretRef: a/B}}`, `spec.events[1]: must be one of succeeded, failed, preempted, stuck-queued, budget, alert, got "sucess"`},
		{`{events: [failed, failed], receiver: {secretRef: a/B}}`, `spec.events[1]: "failed" is listed twice`},
		{`{events: [stuck-queued], receiver: {secretRef: a/B}}`, `spec.stuckAfter: is required with the stuck-queued event`},
		{`{events: [stuck-queued], stuckAfter: 10s, receiver: {secretRef: a/B}}`, `spec.stuckAfter: must be at least 1m`},
		{`{events: [failed], stuckAfter: 10m, receiver: {secretRef: a/B}}`, `spec.stuckAfter: is only used with the stuck-queued event`},
		{`{events: [failed], stuckAfter: soon, receiver: {secretRef: a/B}}`, `spec.stuckAfter: "soon" is not a duration`},
		{`{events: [failed], receiver: {secretRef: a/B}, format: discord}`, `spec.format: must be one of json, slack, teams, got "discord"`},
		{`{events: [failed], receiver: {secretRef: nope}}`, `spec.receiver.secretRef:`},
		{`{events: [failed], receiver: {}}`, `spec.receiver.secretRef: is required`},
		{`{events: [failed], receiver: "https://hooks.slack.com/x"}`, `spec.receiver:`},
		{`{events: [failed], receiver: {secretRef: a/B}, scope: {project: NLP}}`, `spec.scope.project:`},
		{`{events: [failed], receiver: {secretRef: a/B}, formt: slack}`, `spec.formt: unknown field (did you mean "format"?)`},
	} {
		src := "apiVersion: gpufleet.dev/v1\nkind: Notification\nmetadata: {name: n}\nspec: " + tc.spec + "\n"
		_, fe := ParseDocument([]byte(src), YAML, Checks{})
		if !strings.Contains(fe.Error(), tc.want) {
			t.Errorf("spec %s: problems %q, want %q", tc.spec, fe.Error(), tc.want)
		}
	}
}
