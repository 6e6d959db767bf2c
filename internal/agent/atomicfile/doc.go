// Package atomicfile writes files so that a reader, or a process restarted
// after a crash, sees either the old content or the new one, never a torn
// mix. The agent and the supervisor keep their durable records this way.
//
// A write goes to a temporary file in the same directory, is synced, renamed
// over the target, and the directory is synced so the rename itself survives
// a power loss.
package atomicfile
