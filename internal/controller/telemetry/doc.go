// Package telemetry is the controller's component for what agents report
// of their GPUs: each node's newest sample and telemetry source, one
// compact efficiency history per running attempt (efficiency.Tracker),
// the XID errors seen per GPU, each ended attempt's last verdict (so a
// job's efficiency stays readable after it finishes), and the recent
// alerts.
//
// A Tracker has its own lock and never calls back into the controller, so
// the controller may call it with or without its own lock held (lock
// order: controller, then tracker). Agent syncs feed it outside the
// controller's lock, one node at a time; classification of every attempt
// (Evaluate) also runs outside it. Nothing here is durable: telemetry is
// rebuilt from the next samples after a restart.
package telemetry
