package secrets

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
)

// Redactor scrubs known secret values from text. Its values are kept up to
// date one at a time (Add and Remove, counted, so a value added twice stays
// until removed twice) without rebuilding anything: a server minting a job
// token per attempt adds one value per attempt, not the whole set again.
// Set installs a prebuilt Scrubber as well, applied first. The zero value
// scrubs nothing. It is safe for concurrent use.
type Redactor struct {
	p atomic.Pointer[Scrubber]

	mu sync.RWMutex
	// byPrefix indexes the values by their first minScrubLen bytes; count
	// is how many times each was added.
	byPrefix map[string][]string
	count    map[string]int
	// first marks the bytes some value starts with, to skip the rest.
	first [256]int
}

// Set replaces the prebuilt scrubber.
func (r *Redactor) Set(s *Scrubber) { r.p.Store(s) }

// Add makes v one of the values scrubbed (a nil Redactor ignores it, as
// Remove does); values shorter than a secret can
// be (minScrubLen) are ignored, as by NewScrubber.
func (r *Redactor) Add(v string) {
	if r == nil || len(v) < minScrubLen {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.count == nil {
		r.count, r.byPrefix = map[string]int{}, map[string][]string{}
	}
	r.count[v]++
	if r.count[v] > 1 {
		return
	}
	k := v[:minScrubLen]
	r.byPrefix[k] = append(r.byPrefix[k], v)
	r.first[v[0]]++
}

// Remove undoes one Add of v.
func (r *Redactor) Remove(v string) {
	if r == nil || len(v) < minScrubLen {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := r.count[v]
	if !ok {
		return
	}
	if n > 1 {
		r.count[v] = n - 1
		return
	}
	delete(r.count, v)
	k := v[:minScrubLen]
	vs := r.byPrefix[k]
	for i, x := range vs {
		if x == v {
			vs = append(vs[:i:i], vs[i+1:]...)
			break
		}
	}
	if len(vs) == 0 {
		delete(r.byPrefix, k)
	} else {
		r.byPrefix[k] = vs
	}
	r.first[v[0]]--
}

// Scrub returns text with every known secret value replaced by
// "[redacted]": the prebuilt scrubber's, then the added values, the longest
// that matches at each position first.
func (r *Redactor) Scrub(text string) string {
	if r == nil {
		return text
	}
	if s := r.p.Load(); s != nil {
		text = s.Scrub(text)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.count) == 0 {
		return text
	}
	var out strings.Builder
	last := 0 // text[last:i] is not yet written
	for i := 0; i+minScrubLen <= len(text); {
		if r.first[text[i]] == 0 {
			i++
			continue
		}
		best := 0
		for _, v := range r.byPrefix[text[i:i+minScrubLen]] {
			if len(v) > best && strings.HasPrefix(text[i:], v) {
				best = len(v)
			}
		}
		if best == 0 {
			i++
			continue
		}
		if out.Len() == 0 {
			out.Grow(len(text))
		}
		out.WriteString(text[last:i])
		out.WriteString(redacted)
		i += best
		last = i
	}
	if last == 0 {
		return text
	}
	out.WriteString(text[last:])
	return out.String()
}

// Handler is a slog.Handler that redacts known secret values from the
// message and every attribute (strings, errors, anything formatted) before
// passing the record on. Attributes added with WithAttrs are scrubbed
// with the values known at each Handle, not when they were added.
type Handler struct {
	next slog.Handler
	r    *Redactor
	// pre are attributes and groups added with WithAttrs and WithGroup,
	// replayed at Handle so they are scrubbed with the current values.
	pre []func(slog.Handler) slog.Handler
}

// NewHandler wraps next.
func NewHandler(next slog.Handler, r *Redactor) *Handler { return &Handler{next: next, r: r} }

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.Scrub(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	next := h.next
	for _, f := range h.pre {
		next = f(next)
	}
	return next.Handle(ctx, out)
}

func (h *Handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.Scrub(v.String()))
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]any, len(attrs))
		for i, x := range attrs {
			out[i] = h.attr(x)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		s := fmt.Sprint(v.Any())
		if t := h.r.Scrub(s); t != s {
			return slog.String(a.Key, t)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.with(func(n slog.Handler) slog.Handler {
		out := make([]slog.Attr, len(attrs))
		for i, a := range attrs {
			out[i] = h.attr(a)
		}
		return n.WithAttrs(out)
	})
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return h.with(func(n slog.Handler) slog.Handler { return n.WithGroup(name) })
}

func (h *Handler) with(f func(slog.Handler) slog.Handler) *Handler {
	pre := append(append([]func(slog.Handler) slog.Handler{}, h.pre...), f)
	return &Handler{next: h.next, r: h.r, pre: pre}
}
