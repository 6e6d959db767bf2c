// Package cost meters, reports and budgets what GPU capacity costs.
//
// It is part of the pure core (DESIGN.md §1): nothing here reads the clock,
// starts goroutines, does I/O or uses global randomness. Time comes in as
// arguments and decisions come out as values; the controller persists
// ledger entries, runs the evaluation every minute and carries out the
// actions.
//
// What it owns:
//
//   - The arithmetic on model.Money (integer micro-dollars, never a float
//     in the ledger; the type and the ledger row, model.LedgerEntry, live
//     in package model so the store keeps them without importing cost).
//   - Meter: turns node usage over an interval into ledger entries. Every
//     second of every node is attributed, to allocations by GPU share (CPU
//     share for CPU-only work) and the remainder to idle.
//   - Rollup and Report: hourly and daily aggregates maintained
//     incrementally as entries are added; reports read only rollups.
//   - Budgets: periods, thresholds that fire once per period, block-new
//     admission and stop decisions.
//   - Prices: custom and amortised prices for owned machines from CSV.
//
// Subpackages: forecast (daily spend forecast with prediction intervals),
// purchase (commitment / spot mix recommendation) and earlystop (metric
// policies that stop or flag runs).
//
// Invariants, all exact and fuzz-tested:
//
//   - For every node and every metering pass, the sum of its allocation
//     entries plus its idle entry equals the node's cost for the pass.
//   - Node cost is telescoping: metering [a,b) and [b,c) separately gives
//     the same node total as metering [a,c) (see NodeCost).
//   - No entry carries negative money.
//
// See docs/cost.md for rounding rules, the price CSV format and budgets.
package cost
