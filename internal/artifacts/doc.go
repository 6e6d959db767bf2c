// Package artifacts is the server's catalogue of a project's checkpoints
// and pushed artefacts (model files) in object storage (docs/artifacts.md):
// it lists them, serves their files verified, takes pushes, deletes, and
// applies each project's retention and collects unreferenced objects.
//
// It reads and writes the layout of package ckptsync, sealed with the
// project's data key. Checkpoints are the job folders the nodes upload
// (<job>/latest, <job>/m/, <job>/o/); pushed artefacts add, per project:
//
//	<index>/<set>/<version>   a version's manifest (name, tags, files)
//	<index>/<set>/~           a marker: the set exists (kept after its versions)
//	<set>/o/<name>            a file's content, as a job's objects
//
// where <index> is a keyed hash of a fixed label and <set> of the
// artefact's name, so the bucket shows neither names nor projects.
//
// The server is in the data path: the CLI sends and receives plaintext
// over the API and the server seals, verifies and stores, so neither the
// storage's credentials nor the data key ever leave the server (except to
// the nodes that run the project's attempts, as before).
//
// Invariants:
//   - A read verifies every byte it returns: each sealed chunk, then the
//     file's size and SHA-256 from the manifest; a mismatch is an error
//     naming the object and file, never silently short data.
//   - Garbage collection deletes an object only when no manifest of its
//     folder (and not latest) names it and it is older than Grace, and
//     never touches a folder one of whose manifests does not open. An
//     upload reuses an unreferenced object only when younger than
//     ckptsync.ReuseWindow (< Grace), so it never names one being deleted.
//   - Retention keeps a job's latest checkpoint and the newest N others,
//     and a pushed artefact's versions tagged with a kept tag and the
//     newest N others. A push's commit and a project's retention take the
//     project's lock, so a version cannot be committed naming objects a
//     concurrent retention round is removing.
package artifacts
