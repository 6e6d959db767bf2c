package ckptsync

import (
	"testing"
	"time"
)

func TestParseMarker(t *testing.T) {
	t.Parallel()
	mtime := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for in, want := range map[string]struct {
		step int64
		at   time.Time
	}{
		"step=1200\n":                       {1200, mtime},
		"1200":                              {1200, mtime},
		"step 7 2026-12-01T10:00:00Z":       {7, at},
		"time=2026-12-01T10:00:00Z step=42": {42, at},
		`{"step": 9, "time": "2026-12-01T10:00:00Z"}`: {9, at},
		`{"step": 9}`: {9, mtime},
		"work=5\n":    {5, mtime},
		"":            {0, mtime},
		"done":        {0, mtime},
	} {
		step, got := parseMarker([]byte(in), mtime)
		if step != want.step || !got.Equal(want.at) {
			t.Errorf("parseMarker(%q) = %d, %v; want %d, %v", in, step, got, want.step, want.at)
		}
	}
}
