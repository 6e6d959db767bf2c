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

// Instance states a provider reports in Instance.State. A provider may use
// others; these are the ones callers branch on.
const (
	// StatePending: accepted and billed, still booting.
	StatePending = "pending"
	// StateRunning: booted and usable.
	StateRunning = "running"
	// StateTerminated: gone, by Terminate or interruption. Only Launch's
	// idempotent replay reports it; List never does.
	StateTerminated = "terminated"
)

// ErrUnknownOffer: Launch was asked for an offer this provider does not
// sell (a stale or foreign offer). Retrying it will not help.
var ErrUnknownOffer = errors.New("offer not sold by this provider")

// QuotaError says a launch would exceed an account quota. It matches
// ErrQuotaExceeded with errors.Is, so callers that only branch on the kind
// need not know the type.
type QuotaError struct {
	Offer model.Offer
	// Quota names the limit, e.g. "aws H100 GPUs".
	Quota string
	// Limit, Used and Requested are in the quota's unit (GPUs for a GPU
	// quota).
	Limit, Used, Requested int
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%s: quota %s is %d, %d in use, %d requested", ErrQuotaExceeded, e.Quota, e.Limit, e.Used, e.Requested)
}

// Is makes errors.Is(err, ErrQuotaExceeded) true.
func (e *QuotaError) Is(target error) bool { return target == ErrQuotaExceeded }

// IsQuotaExceeded reports whether err is (or wraps) a quota error.
func IsQuotaExceeded(err error) bool { return errors.Is(err, ErrQuotaExceeded) }

// IsTransient reports whether err is (or wraps) ErrTransient: the same call
// may succeed if retried later.
func IsTransient(err error) bool { return errors.Is(err, ErrTransient) }

// IgnoreNotFound returns nil for ErrNotFound and err otherwise.
func IgnoreNotFound(err error) error {
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// Optional capabilities. A caller finds them by type assertion on a
// Provider (p.(provider.InterruptionWatcher)); a driver declares each one it
// implements with a var _ assertion, and providertest exercises it. The
// core never asks a driver's name: what a pool can do follows from these.
//
//   - Launcher: the default. A Provider that is not FixedCapacity buys
//     machines: the scale loop launches its offers for pools of its driver,
//     terminates idle nodes, and lists its instances for leaks.
//   - FixedCapacity: the machines exist already (this machine, owned hosts,
//     a Kubernetes cluster's nodes). Its pools are never launched into or
//     scaled down; their cost is the machines' declared prices.
//   - InterruptionWatcher: reclaims instances with notice; the scale loop
//     drains their nodes. Interrupter: can be told to (drills, demos).
//     NoticeSink: learns its notices from the instances' agents.
//   - SelfJoining: its instances' agents register their nodes themselves.
//   - Adopter: its machines are declared by name in pools and register
//     their agents themselves (owned machines); a registering node joins
//     the pool that declares it.
//   - Biller: reports what each instance cost, so stop times are the
//     provider's.
//   - PriceSource: live prices that override the embedded catalog's.
//   - Versioned: says when its answers last changed, so a caller can keep
//     what it listed (a simulated cloud, which changes only when called).
//
// A driver also registers a PoolPricer (see PoolPrice) so a pool can be
// priced from its spec alone, before the pool exists.

// Notice warns that the provider will stop an instance at Deadline (a spot
// or preemptible reclaim). The instance keeps running until then.
type Notice struct {
	InstanceID string    `json:"instanceId"`
	IssuedAt   time.Time `json:"issuedAt"`
	Deadline   time.Time `json:"deadline"`
	// Reason says why, e.g. "spot-interruption" or "manual".
	Reason string `json:"reason"`
}

// InterruptionWatcher is implemented by providers that reclaim instances
// with advance notice.
type InterruptionWatcher interface {
	// Notices returns every outstanding notice: issued at or before now for
	// an instance that List still returns, ordered by Deadline then
	// InstanceID. It is level-triggered: a notice is repeated on each call
	// until its instance is gone, so a caller that missed one (restart,
	// lost poll) still sees it. Safe for concurrent use.
	Notices(ctx context.Context) ([]Notice, error)
}

// NoticeSink is implemented by InterruptionWatchers whose notices come
// from the instances themselves: the cloud has no API that lists them, so
// each instance's agent reads its own (instance metadata) and carries it
// on its sync, and the server hands it here once it has checked that the
// reporting node is that instance's.
type NoticeSink interface {
	// ReportNotice records n for the instance n.InstanceID; Notices
	// returns it from then on while the instance lives. Idempotent: an
	// instance keeps its first deadline. Safe for concurrent use.
	ReportNotice(n Notice) error
}

// SelfJoining is implemented by drivers whose instances start gpufleet's
// agent themselves (from their user-data) and register their node: the
// scale loop leaves such a node launching until its agent registers,
// rather than starting it (controller.ScaleConfig.StartNode) or marking
// it ready with the offer's GPUs.
type SelfJoining interface {
	SelfJoining()
}

// Adopter is implemented by fixed-capacity drivers whose machines are
// declared by name in their pools and join by registering their agents
// (node id = machine name), unlaunched. The controller places such a node
// in the pool that declares it, at the machine's price, and takes it out
// of the pool when no pool declares it any more.
type Adopter interface {
	// Declared returns the pool that declares machine id and the
	// machine's price per hour; ok is false when no pool does. It must
	// reflect the pools last given to the driver, be quick, and not call
	// the controller. Safe for concurrent use.
	Declared(id string) (pool string, pricePerHour float64, ok bool)
}

// Interrupter is implemented by providers that can be told to reclaim an
// instance, as a drill or a demo (`gpufleet nodes interrupt NODE`).
type Interrupter interface {
	// Interrupt issues a notice for instance id now, with the provider's
	// usual lead time, and returns it. It is idempotent: an instance that
	// already has a notice keeps the earlier deadline, and that notice is
	// returned. Errors: ErrNotFound when the instance is unknown or gone.
	Interrupt(ctx context.Context, id string) (Notice, error)
}

// Usage is what one instance has cost: from Start (launch accepted) to End
// (stopped, or now while it runs), billed per whole second.
type Usage struct {
	InstanceID string      `json:"instanceId"`
	Offer      model.Offer `json:"offer"`
	Start      time.Time   `json:"start"`
	End        time.Time   `json:"end"`
	// Running is true while the instance is still billed; End is then now.
	Running bool  `json:"running"`
	Seconds int64 `json:"seconds"`
	// MicroUSD is the charge in integer micro-dollars.
	MicroUSD int64 `json:"microUsd"`
}

// Biller is implemented by providers that report what their instances
// cost, so the ledger can be checked against the provider's own bill.
type Biller interface {
	// Usage returns one record per instance launched through this provider,
	// running or not, ordered by Start then InstanceID, amounts as of now.
	// Safe for concurrent use.
	Usage(ctx context.Context) ([]Usage, error)
}

// Launches reports whether p buys machines: every Provider does unless it
// declares FixedCapacity.
func Launches(p Provider) bool {
	_, fixed := p.(FixedCapacity)
	return !fixed
}

// Versioned is implemented by drivers that can tell when what they answer
// changed: the scale loop keeps the inventory, notices and offers it
// listed while the version stays the same, rather than listing again each
// cycle.
type Versioned interface {
	// Version returns a number that changes (as of now) whenever what
	// Offers, Prices, List, Notices, or Usage's entries for stopped
	// instances would return may have changed since it last returned that
	// number; Usage's running entries (their End is now) may change with
	// the clock alone. A caller that reads the version before listing may
	// keep the listing while the version is unchanged. Safe for
	// concurrent use.
	Version() uint64
}

// PriceSource is implemented by providers that read live prices (a cloud's
// spot price history), which override the embedded catalog's snapshot.
type PriceSource interface {
	// Prices returns the provider's offers with their current
	// PricePerHour and the time the prices were read (AsOf). The result
	// is a fresh slice; it may cover fewer offers than Offers, and an
	// offer absent from it keeps the catalog's price. Errors are
	// transient as far as the caller is concerned: it keeps the prices it
	// had. Safe for concurrent use.
	Prices(ctx context.Context) (prices []model.Offer, asOf time.Time, err error)
}

// PoolPrice is how a pool's nodes are priced from its spec alone (no I/O,
// so `gpufleet plan` prices a pool before it exists). A driver registers a
// PoolPricer returning it.
type PoolPrice struct {
	// Fixed: the pool's machines exist already (FixedCapacity). Each
	// node then costs its entry of NodePrices (one per declared machine,
	// in any order), or PerNode when NodePrices is nil.
	Fixed      bool
	NodePrices []float64
	PerNode    float64
	// Clouds, for a pool that buys: the catalog providers its offers
	// come from (empty: every provider in the catalog).
	Clouds []string
	// Unknown, when set, says why the pool cannot be priced.
	Unknown string
}

// PoolPricer prices a pool of one driver from its spec.
type PoolPricer func(spec model.NodePoolSpec) PoolPrice

// FixedCapacity is implemented by providers whose machines exist already
// (this machine, owned hosts). Such a provider answers Launch and Terminate
// with ErrFixedCapacity, and its Offers and List describe exactly these
// machines: one instance per machine with Instance.ID equal to Node.ID and
// an offer that states the machine's GPUs, CPU and memory; Offers lists
// exactly the distinct offers of the machines that have GPUs.
type FixedCapacity interface {
	// Machines returns the declared machines. Safe for concurrent use.
	Machines(ctx context.Context) ([]model.Node, error)
}
