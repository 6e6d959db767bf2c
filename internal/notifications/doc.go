// Package notifications turns what happened in the fleet (a job ended, was
// preempted or waited too long, a budget fired, an alert) into the webhook
// bodies the fleet's Notification documents ask for: it selects the
// documents whose scope and events match and renders each body in its
// format (gpufleet JSON, Slack incoming-webhook blocks, Microsoft Teams
// MessageCard). It holds no state: the controller queues what it returns
// in its webhook outbox (package controller/notify), in the batch of the
// change that caused it.
package notifications
