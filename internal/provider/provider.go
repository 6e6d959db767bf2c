// Package provider is the capacity seam (DESIGN.md §4): the interface every
// source of machines implements — simulated clouds, owned machines, this
// machine, Kubernetes clusters, real clouds — and the typed errors callers
// branch on. Drivers live in subpackages and import this one, never the
// reverse.
package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Provider is a source of GPU machines. Implementations are safe for
// concurrent use. Every method honours ctx.
type Provider interface {
	// Name identifies the provider in offers, nodes and events.
	Name() string
	// Offers lists what can be bought (or, for fixed capacity, what exists)
	// now. The result is a fresh slice the caller may keep.
	Offers(ctx context.Context) ([]model.Offer, error)
	// Launch starts one instance for offer. It is idempotent per
	// req.Token: a retry with the same token returns the same instance.
	// Errors: *InsufficientCapacityError, ErrQuotaExceeded, ErrTransient,
	// ErrFixedCapacity.
	Launch(ctx context.Context, req LaunchRequest) (Instance, error)
	// Terminate stops an instance and its billing. Terminating an instance
	// that is already gone is success.
	Terminate(ctx context.Context, id string) error
	// List returns every instance the provider holds for gpufleet, so the
	// controller can find leaks.
	List(ctx context.Context) ([]Instance, error)
}

// LaunchRequest asks for one instance.
type LaunchRequest struct {
	Offer model.Offer
	// Token makes Launch idempotent; the controller derives it from the
	// node it is launching.
	Token  string
	Labels map[string]string
}

// Instance is a machine as its provider sees it.
type Instance struct {
	ID         string
	Offer      model.Offer
	State      string
	LaunchedAt time.Time
	Labels     map[string]string
}

// Errors providers return; test with errors.Is / errors.As.
var (
	ErrNotFound      = errors.New("instance not found")
	ErrQuotaExceeded = errors.New("quota exceeded")
	ErrTransient     = errors.New("transient provider error")
	// ErrFixedCapacity: the provider's machines exist already and cannot
	// be launched or terminated by gpufleet (this machine, owned hosts).
	ErrFixedCapacity = errors.New("fixed-capacity provider cannot launch or terminate")
)

// InsufficientCapacityError says an offer has no capacity now.
type InsufficientCapacityError struct{ Offer model.Offer }

func (e *InsufficientCapacityError) Error() string {
	return fmt.Sprintf("insufficient capacity for %s %s in %s %s", e.Offer.Provider, e.Offer.InstanceType, e.Offer.Region, e.Offer.Zone)
}

// IsInsufficientCapacity reports whether err is (or wraps) an
// InsufficientCapacityError.
func IsInsufficientCapacity(err error) bool {
	var e *InsufficientCapacityError
	return errors.As(err, &e)
}
