// Package advisor answers "which GPUs, how many, how long and for how much"
// for a training or serving workload: it turns a workload Profile into a
// per-GPU memory breakdown, searches parallel plans (tensor, pipeline and
// data parallelism, ZeRO/FSDP stage, activation recomputation, CPU offload,
// micro-batch) for every accelerator shape in the catalog, estimates the
// time to finish from FLOPs, achievable utilisation, memory bandwidth and
// communication, and costs every offer (on-demand, spot with Young/Daly
// checkpoint overhead, reserved from documented discounts).
//
// The package owns the estimation models and their constants; every formula
// and constant carries its source in a comment, and the accuracy tests check
// the models against published ground truth with stated tolerances (see
// docs/advisor.md for the summary).
//
// Invariants:
//   - Pure: no I/O, no clock, no goroutines, no package-level mutable state.
//     Offers, accelerator facts and calibration arrive as arguments; the same
//     inputs give the same Result, byte for byte.
//   - "Does not fit" is a verdict, not an error: Rank returns an empty
//     ranking with the smallest shortfall named. Errors are reserved for
//     invalid profiles, and name the field (model.FieldErrors).
//   - No offer is dropped silently: an offer that cannot be estimated (no
//     spec figures, TPU slices) is listed in Result.NotEstimated with why.
//   - Memory is monotone: more micro-batch or sequence never needs less
//     memory (a fuzz test holds this).
//   - Money here is an estimate (float dollars), never ledger money.
package advisor
