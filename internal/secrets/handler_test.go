package secrets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
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

func TestRedactorAddRemove(t *testing.T) {
	var r Redactor
	if got := r.Scrub("nothing known yet gfj_aaaaaaaaaa"); got != "nothing known yet gfj_aaaaaaaaaa" {
		t.Fatalf("empty redactor scrubbed: %q", got)
	}
	r.Add("gfj_aaaaaaaaaa")
	r.Add("gfj_aaaaaaaaaa-longer") // same prefix: the longest match wins
	r.Add("hunter2hunter2")
	r.Add("hunter2hunter2") // twice: stays until removed twice
	r.Add("1")              // too short to be a secret
	text := "a=gfj_aaaaaaaaaa b=gfj_aaaaaaaaaa-longer c=hunter2hunter2hunter2hunter2 n=1 gfj_aaaa"
	if got, want := r.Scrub(text), "a=[redacted] b=[redacted] c=[redacted][redacted] n=1 gfj_aaaa"; got != want {
		t.Fatalf("Scrub = %q, want %q", got, want)
	}
	r.Remove("gfj_aaaaaaaaaa-longer")
	r.Remove("hunter2hunter2")
	if got, want := r.Scrub(text), "a=[redacted] b=[redacted]-longer c=[redacted][redacted] n=1 gfj_aaaa"; got != want {
		t.Fatalf("after removing one of two adds: Scrub = %q, want %q", got, want)
	}
	r.Remove("hunter2hunter2")
	r.Remove("gfj_aaaaaaaaaa")
	r.Remove("never-added-value")
	if got := r.Scrub(text); got != text {
		t.Fatalf("after removing every value: Scrub = %q", got)
	}
	// A prebuilt scrubber (Set) still applies alongside added values.
	r.Set(NewScrubber("tok-s3cr3t-value"))
	r.Add("hunter2hunter2")
	if got, want := r.Scrub("tok-s3cr3t-value hunter2hunter2"), "[redacted] [redacted]"; got != want {
		t.Fatalf("Scrub = %q, want %q", got, want)
	}
}

// TestRedactorMatchesScrubber holds the incremental redactor to
// NewScrubber's answer for values that do not overlap.
func TestRedactorMatchesScrubber(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var r Redactor
	var vals []string
	for i := range 200 {
		v := fmt.Sprintf("gfj_%08x%d", rng.Uint32(), i)
		vals = append(vals, v)
		r.Add(v)
	}
	s := NewScrubber(vals...)
	for range 500 {
		var b strings.Builder
		for range 8 {
			switch rng.IntN(3) {
			case 0:
				b.WriteString(vals[rng.IntN(len(vals))])
			case 1:
				b.WriteString(vals[rng.IntN(len(vals))][:8])
			default:
				b.WriteString(" job ended; ")
			}
		}
		text := b.String()
		if got, want := r.Scrub(text), s.Scrub(text); got != want {
			t.Fatalf("Scrub(%q) = %q, NewScrubber says %q", text, got, want)
		}
	}
}

// BenchmarkRedactorAdd is the cost of one more value (a job token minted)
// with 10,000 already known, against rebuilding a Scrubber with them all.
func BenchmarkRedactorAdd(b *testing.B) {
	vals := make([]string, 10000)
	for i := range vals {
		vals[i] = fmt.Sprintf("gfj_%032x", i)
	}
	b.Run("incremental", func(b *testing.B) {
		var r Redactor
		for _, v := range vals {
			r.Add(v)
		}
		for i := 0; b.Loop(); i++ {
			v := fmt.Sprintf("gfj_new%026x", i)
			r.Add(v)
			r.Remove(v)
		}
	})
	b.Run("rebuild", func(b *testing.B) {
		var r Redactor
		for b.Loop() {
			r.Set(NewScrubber(vals...))
			r.Scrub("x") // strings.NewReplacer builds lazily
		}
	})
}

// BenchmarkRedactorScrub scrubs a 200-byte log line with 10,000 values known.
func BenchmarkRedactorScrub(b *testing.B) {
	var r Redactor
	vals := make([]string, 10000)
	for i := range vals {
		vals[i] = fmt.Sprintf("gfj_%032x", i)
		r.Add(vals[i])
	}
	s := NewScrubber(vals...)
	line := "attempt ended job_id=j-0123456789 attempt=1 state=succeeded reason= job_state=succeeded token=" + vals[42] + " node=n-abcdef0123 queue=default project=default"
	b.Run("incremental", func(b *testing.B) {
		for b.Loop() {
			r.Scrub(line)
		}
	})
	b.Run("replacer", func(b *testing.B) {
		for b.Loop() {
			s.Scrub(line)
		}
	})
}
