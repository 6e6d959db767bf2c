// Package aws is the EC2 driver of the provider seam (DESIGN.md §4), on
// aws-sdk-go-v2.
//
// It owns one pool's view of one region: offers from DescribeInstanceTypes
// and DescribeInstanceTypeOfferings (GPU types, in the zones of the pool's
// subnets), priced from the embedded catalog with spot prices refreshed by
// DescribeSpotPriceHistory; launches with CreateFleet of type instant (one
// instance per call, spot with price-capacity-optimized); inventory and
// termination by tag.
//
// Invariants:
//   - Every instance it launches carries the tags gpufleet:cluster,
//     gpufleet:pool, gpufleet:node and gpufleet:launch-token; List and
//     Terminate touch only instances whose cluster and pool tags match, so
//     two pools (or two fleets) in one account never see each other's.
//   - Launch is idempotent per LaunchRequest.Token: in this process by a
//     per-token lock and memory of live launches; across restarts, and after
//     a terminate, by the launch-token tag (looked up before launching) and
//     the fleet's ClientToken.
//   - Errors are the provider's typed kinds: InsufficientInstanceCapacity
//     is *provider.InsufficientCapacityError for the offer asked for,
//     vCPU and spot-count limits match provider.ErrQuotaExceeded,
//     throttling and EC2's own faults match provider.ErrTransient after
//     the SDK's retryer has given up.
//   - Credentials come from the SDK's default chain (environment, shared
//     config, IMDS role); nothing here stores a secret.
//
// Spot notices: EC2 has no API that lists them, so the driver is an
// InterruptionWatcher fed by ReportNotice with what each instance's agent
// read from instance metadata (subpackage imds) and carried on its sync.
package aws
