// Package ckptsync makes a job's checkpoints follow the job (DESIGN.md §7):
// it syncs an attempt's local checkpoint folder with the job's place in
// object storage. Restore downloads the latest complete checkpoint before
// the attempt starts; Upload sends the folder when the job has written its
// LATEST marker (Watch polls for it) and once more when the attempt stops.
//
// Layout under the store, every object sealed (objstore.Sealer) under the
// project's data key, every name opaque:
//
//	<job>/o/<name>     a file's content; name is the keyed hash of its SHA-256
//	<job>/m/<name>     a checkpoint's manifest (files, sizes, SHA-256, step, time)
//	<job>/latest       the manifest of the latest complete checkpoint
//
// where <job> is the keyed hash of the job id.
//
// Invariants:
//   - latest is written last, after every object and the manifest's history
//     copy, each a whole object (objstore.Store.Put is atomic): an upload
//     cut short at any point leaves the previous checkpoint latest.
//   - Objects are content-addressed: a file already stored (same content,
//     same job) is not uploaded again.
//   - Restore verifies every file's SHA-256 (and the seal authenticates it)
//     and moves files into place only when all arrived, LATEST last, so a
//     job never starts on a half-restored folder.
//   - A Syncer is not for concurrent use by several goroutines except that
//     Watch and Upload serialise on its lock.
package ckptsync
