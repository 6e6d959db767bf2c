package secrets

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
)

// Redactor holds the current Scrubber, swapped whenever the set of secret
// values changes (a secret written or deleted, a job token minted). The
// zero value scrubs nothing. It is safe for concurrent use.
type Redactor struct{ p atomic.Pointer[Scrubber] }

// Set replaces the scrubber.
func (r *Redactor) Set(s *Scrubber) { r.p.Store(s) }

// Scrub applies the current scrubber to text.
func (r *Redactor) Scrub(text string) string {
	if r == nil {
		return text
	}
	if s := r.p.Load(); s != nil {
		return s.Scrub(text)
	}
	return text
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
