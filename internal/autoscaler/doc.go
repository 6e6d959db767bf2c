// Package autoscaler decides what capacity to buy and release (DESIGN.md
// §3 Scale). It is pure: Decide takes the pools, the nodes the control plane
// owns, the scheduler's candidates for unplaceable jobs, every provider's
// inventory, a memory of failing offers and now, and returns actions as
// values. The controller carries them out, records events, and feeds launch
// failures back into the Memory.
//
// Invariants:
//   - a pool never grows above Max nor shrinks below Min by an action here;
//   - a pending job already covered by capacity that is launching gets no
//     second launch (no busy loop while an instance boots);
//   - an offer that failed (capacity, quota, launch timeout) is not chosen
//     again until its back-off expires; the next choice for the job is the
//     cheapest candidate in the same region (another zone), then the same
//     provider (another region), then another provider;
//   - every instance a provider lists that no node owns is terminated.
package autoscaler
