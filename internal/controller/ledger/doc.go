// Package ledger is the controller's component for the cost ledger's
// views: the rollups reports, job costs and budget forecasts read
// (cost.Rollup), and the running totals by project, queue and capacity
// type that metrics export.
//
// A Book has its own lock, so cost reports and dashboards do not wait on
// the controller. It keeps memory only: the meter (in the controller)
// adds each pass's entries to the Book and to the same batch that
// advances the meter's clock, so the rows are durable exactly once (a
// crash before the commit loses the pass and its clock together, and the
// next pass meters that time again); Load rebuilds the Book from the
// stored ledger.
package ledger
