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
// Retention does not list the bucket each round: the catalogue keeps
// records of each project's folders (ledger.go), built from the manifests
// gpufleet wrote, and reads again only folders that changed (a running
// job's latest has another ETag; a commit or delete through this server)
// or are due. Objects retention leaves unnamed wait out Grace, then go
// with a HEAD and a conditional delete; a walk over each storage's keys
// (collect.go), a bounded page per round from a resumable cursor, once per
// SweepEvery, collects what crashed uploads left and marks folders whose
// manifests the records lack to be read again.
//
// Invariants:
//   - A read verifies every byte it returns: each sealed chunk, then the
//     file's size and SHA-256 from the manifest; a mismatch is an error
//     naming the object and file, never silently short data.
//   - Collection deletes an object only when no manifest of its folder in
//     the records (nor latest) names it, it is older than Grace, and the
//     folder's records are current (not marked to be read, no manifest
//     that does not open); and it deletes conditionally on the ETag it
//     saw (objstore.DeleteIfMatch), so an object written again since (an
//     upload that found it too old to reuse) survives. An upload reuses an
//     unreferenced object only when younger than ckptsync.ReuseWindow
//     (< Grace/2), so it never names one being deleted.
//   - Retention keeps a job's latest checkpoint and the newest N others,
//     and a pushed artefact's versions tagged with a kept tag and the
//     newest N others. A push's commit, a delete and a project's retention
//     take the project's lock (the walk, the locks of the projects on its
//     storage), so a version cannot be committed naming objects a
//     concurrent round is removing.
package artifacts
