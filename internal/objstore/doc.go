// Package objstore is the object storage seam (DESIGN.md §7): a small Store
// interface with two backends, an S3-compatible bucket (S3) and a folder on
// a shared filesystem (Dir), and the client-side sealing of objects
// (Sealer) that keeps a bucket's contents unreadable without a project's
// data key.
//
// Invariants:
//   - A Put is all or nothing: a reader never sees a half-written object
//     under its name (S3 completes a multipart upload only after every
//     part; Dir writes a temporary file and renames it).
//   - Errors name the object (store and key) and match ErrNotFound,
//     ErrAccessDenied, ErrNoBucket or ErrUnreachable where the cause is
//     one of those, so callers can tell a fault from "no such checkpoint".
//   - Nothing here logs, and credentials never appear in errors.
package objstore
