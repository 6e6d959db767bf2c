package secrets

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/slogtest"
)

func TestHandlerRedacts(t *testing.T) {
	var buf bytes.Buffer
	var r Redactor
	log := slog.New(NewHandler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), &r))
	child := log.With("token", "tok-s3cr3t-value").WithGroup("g")
	r.Set(NewScrubber("tok-s3cr3t-value", "hunter2hunter2"))
	child.Debug("saw hunter2hunter2", "err", errors.New("bad hunter2hunter2"), "list", []string{"hunter2hunter2"}, slog.Group("inner", "v", "hunter2hunter2"))
	out := buf.String()
	for _, s := range []string{"hunter2hunter2", "tok-s3cr3t-value"} {
		if strings.Contains(out, s) {
			t.Errorf("log line holds %q: %s", s, out)
		}
	}
	if strings.Count(out, "[redacted]") != 5 {
		t.Errorf("want 5 redactions: %s", out)
	}
}

func TestHandlerConformance(t *testing.T) {
	var buf bytes.Buffer
	var r Redactor
	h := NewHandler(slog.NewJSONHandler(&buf, nil), &r)
	results := func() []map[string]any { return parseJSONLines(t, buf.Bytes()) }
	if err := slogtest.TestHandler(h, results); err != nil {
		t.Fatal(err)
	}
}

func parseJSONLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		m := map[string]any{}
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}
