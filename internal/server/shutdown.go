package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"time"
)

// DefaultShutdownTimeout bounds a server's shutdown (--shutdown-timeout).
const DefaultShutdownTimeout = 30 * time.Second

// stopped is a server component's end: its name and error.
type stopped struct {
	name string
	err  error
}

// drain stops the HTTP server and waits for the other components (named in
// running) to return, for at most the time left before deadline. Past it,
// it logs which are still stopping and returns anyway: a shutdown ends
// within its bound (what agents run is supervised apart and survives).
func drain(httpSrv *http.Server, errc chan stopped, running []string, deadline time.Time, log *slog.Logger) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := httpSrv.Shutdown(ctx); err != nil {
		log.Warn("API requests still open at the shutdown bound; closing them", "err", err)
		_ = httpSrv.Close()
	} else {
		log.Info("shutdown: API closed")
	}
	var errs []error
	for len(running) > 0 {
		select {
		case s := <-errc:
			running = slices.DeleteFunc(running, func(n string) bool { return n == s.name })
			if s.err != nil && !errors.Is(s.err, context.Canceled) {
				errs = append(errs, s.err)
			}
			log.Info("shutdown: stopped", "component", s.name)
		case <-ctx.Done():
			log.Error("shutdown bound reached: exiting without waiting for these components", "components", running)
			return errors.Join(errs...)
		}
	}
	return errors.Join(errs...)
}

// waitUntil runs wait (a WaitGroup's Wait), returning when it does or at
// *deadline (read when waitUntil runs: deferred, once the shutdown set it),
// logging what it gave up on.
func waitUntil(wait func(), deadline *time.Time, what string, log *slog.Logger) {
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	if deadline.IsZero() {
		<-done
		return
	}
	t := time.NewTimer(time.Until(*deadline))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		log.Error("shutdown bound reached: exiting without waiting for "+what, "component", what)
	}
}
