package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
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

// StopAll ends every simulated machine's workloads at shutdown: the
// simulated clouds live in this process, so their instances — and what
// runs on them — end with it. Each replica's process group gets SIGTERM,
// then SIGKILL (with its supervisor) if it is still alive when ctx ends or
// after its grace; it returns how many were signalled and how many had to
// be killed.
func (s *simNodes) StopAll(ctx context.Context, grace time.Duration) (signalled, killed int) {
	type replica struct {
		dir   string
		child supervisor.Process
	}
	var live []replica
	nodes, _ := os.ReadDir(filepath.Join(s.dataDir, "sim"))
	for _, n := range nodes {
		reps, _ := os.ReadDir(filepath.Join(s.dataDir, "sim", n.Name(), "replicas"))
		for _, r := range reps {
			dir := filepath.Join(s.dataDir, "sim", n.Name(), "replicas", r.Name())
			pids, ok, err := supervisor.ReadPIDs(dir)
			if err != nil || !ok || pids.Child == nil || !supervisor.Alive(pids.Child.PID, pids.Child.Start) {
				continue
			}
			_ = syscall.Kill(-pids.Child.PID, syscall.SIGTERM)
			live = append(live, replica{dir: dir, child: *pids.Child})
		}
	}
	signalled = len(live)
	ctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for len(live) > 0 {
		live = slices.DeleteFunc(live, func(r replica) bool { return !supervisor.Alive(r.child.PID, r.child.Start) })
		if len(live) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			for _, r := range live {
				_ = syscall.Kill(-r.child.PID, syscall.SIGKILL)
			}
			killed = len(live)
			live = nil
		case <-tick.C:
		}
	}
	// Supervisors that outlive their child (or a killed one) go too.
	for _, n := range nodes {
		killReplicas(filepath.Join(s.dataDir, "sim", n.Name(), "replicas"), s.log)
	}
	return signalled, killed
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
