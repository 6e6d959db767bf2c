// Package datacache is a node's cache of datasets (docs/datasets.md): the
// objects of a job's spec.data source, downloaded once per node and shared
// by the attempts that read them, under a size cap with least-recently-used
// eviction.
//
// Invariants:
//   - An entry is named by a keyed hash (HMAC-SHA256 under a key of the
//     node's own) of its project, its dataset and the listing it was
//     downloaded from (every object's key, size and ETag): equal content
//     of one project is one entry, a changed dataset a new one, and a
//     workload cannot guess the name of an entry it was not given.
//   - A download is made in a private temporary folder and renamed into
//     place only once every object is complete and verified: a partial
//     download never becomes an entry, and one left by a crash is removed
//     when the cache opens.
//   - An entry pinned by a running attempt (Acquire's handle, or Pin after
//     an agent restart) is never evicted; concurrent Acquires of one entry
//     download it once.
//   - Entries are read-only to workloads: files 0444 and folders 0555,
//     owned by the agent; the folders above them are 0711, so a workload
//     reaches only the entries whose names it was given.
package datacache
