package podsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/gate"
)

// GateConfig configures a service replica's gate in its pod.
type GateConfig struct {
	// Listen is where the gate listens (":9980"): the port the replica's
	// Service targets.
	Listen string
	// AppPort is the replica's PORT, reached on the pod's loopback.
	AppPort int
	// Key is the project's replica key; a request must carry it
	// ("Authorization: Bearer KEY"). Required.
	Key string
	Log *slog.Logger
}

// OpenGate opens the gate of a service replica's pod: the agent's gate
// (package gate), forwarding the requests that carry cfg.Key to
// 127.0.0.1:cfg.AppPort, the replica in the same network namespace. It
// serves until Close or Shutdown.
func OpenGate(cfg GateConfig) (*gate.Gate, error) {
	if cfg.Key == "" {
		return nil, errors.New("no replica key: the gate would admit no request (the pod's Secret holds it)")
	}
	if cfg.AppPort <= 0 || cfg.AppPort > 65535 {
		return nil, fmt.Errorf("app port %d is not a TCP port", cfg.AppPort)
	}
	app := net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.AppPort))
	g, err := gate.Open(gate.Config{
		Addr: cfg.Listen,
		Key:  cfg.Key,
		Dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", app)
		},
		Log: cfg.Log,
	})
	if err != nil {
		return nil, fmt.Errorf("opening the replica's gate on %s: %w", cfg.Listen, err)
	}
	return g, nil
}

// GateDrain bounds how long the gate lets requests under way finish once
// it is told to stop. The kubelet stops a native sidecar only after the
// job's container has ended, so little is left by then.
const GateDrain = 5 * time.Second

// ServeGate runs the gate (OpenGate) until ctx ends, then lets the
// requests under way finish for up to GateDrain.
func ServeGate(ctx context.Context, cfg GateConfig) error {
	g, err := OpenGate(cfg)
	if err != nil {
		return err
	}
	if cfg.Log != nil {
		cfg.Log.Info("gate open", "addr", g.Addr().String(), "app_port", cfg.AppPort)
	}
	<-ctx.Done()
	drain, cancel := context.WithTimeout(context.Background(), GateDrain)
	defer cancel()
	_ = g.Shutdown(drain)
	return nil
}
