// Package notify is the controller's webhook outbox: notifications (budget
// firings, alerts) waiting for delivery, delivered one at a time, signed,
// retried with backoff and given up after a day.
//
// An Outbox has its own lock. Notifications enter through Queue, which
// appends each to the caller's batch, so a notification is durable with
// the change that made it (a budget's firing, an alert) and never apart
// from it. Every delivery outcome (delivered, given up, next try) is
// committed through the Committer before the next delivery starts, in
// order after the batch that queued it. Delivery is at least once:
// receivers deduplicate by the notification id, which is derived from what
// fired, so the same firing or alert always has the same id.
package notify
