// Package gitops follows a git repository that declares the fleet: every
// poll it fetches one branch, reads the fleet documents in one directory of
// its head commit, and plans them against the applied fleet. A new commit
// is applied when AutoApply is set, as a revision that carries the commit's
// SHA and author; otherwise its plan is kept as pending for `gpufleet plan
// --pending`. Drift (the fleet differs from the head's documents, e.g.
// after a manual apply) is reported in the status, not reverted until the
// next commit.
//
// A Syncer has its own lock and talks to the controller through Target.
// It keeps no state of its own across restarts: which commits were applied
// is read from the revisions, so a crash between seeing a commit and
// applying it applies it on the next poll, and one applied is never
// applied again.
package gitops
