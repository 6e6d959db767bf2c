package server

import (
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"
)

// TestDrainEndsWithinItsBound: a component that never stops does not hold
// the shutdown past its deadline.
func TestDrainEndsWithinItsBound(t *testing.T) {
	t.Parallel()
	errc := make(chan stopped, 2)
	errc <- stopped{name: "controller"}
	start := time.Now()
	err := drain(&http.Server{}, errc, []string{"controller", "local agent"}, start.Add(200*time.Millisecond), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("drain took %v past a 200ms bound", took)
	}
}
