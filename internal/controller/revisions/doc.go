// Package revisions is the controller's component for the declared
// fleet's history: every applied revision, numbered from 1, and the fleet
// as the newest one declares it (documents, node pools, projects).
//
// A Log has its own lock, so readers (the API's revision list, plans,
// drift) do not wait on the controller. Everything it hands out is
// immutable: an apply appends a revision and replaces the declared
// snapshot, never edits one. The Log keeps memory only: the caller commits
// each revision it appends in the same batch as the apply's other changes
// (queues, nodes), so a crash keeps both or neither; Load rebuilds the Log
// from the stored revisions.
package revisions
