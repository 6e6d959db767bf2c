// Package efficiency judges how well running attempts use their GPUs. It
// is pure: no I/O, no clock reads, no goroutines. Time arrives as an
// argument; verdicts and transitions come out as values.
//
// The pipeline: telemetry readings of a node's GPUs are attributed to each
// attempt by the GPU UUIDs of its allocation (Attribute), averaged into one
// Observation per attempt and sample; a History keeps a compact, bounded
// series of them; Classify turns a History into a Verdict with reasons
// under documented Thresholds; a Tracker keeps one History per attempt and
// reports class changes (for alerts, such as "idle since T").
//
// Invariants: a History never grows past its fixed buckets (see History);
// Classify is deterministic for its inputs; money is integer micro-dollars
// (EffectiveCost).
package efficiency
