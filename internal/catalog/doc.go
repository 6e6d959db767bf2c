// Package catalog is gpufleet's built-in knowledge of public GPU capacity:
// the instance types of AWS, GCP, Azure, OCI, Lambda and Vast.ai with their
// list and spot prices, AWS Spot Advisor interruption bands, and a table of
// accelerator specs checked against vendor documents.
//
// The data comes from the shared reference files (see data/PROVENANCE.md).
// The gen command, run by go generate, converts them into data/, which is
// committed and embedded; nothing is read from disk at run time. Load parses
// the embedded data once, at start-up.
//
// Invariants:
//   - A Catalog never changes after Load and is safe for concurrent use.
//     Every method returns a fresh slice that the caller may modify.
//   - An offer is one catalog row with one capacity type: on-demand where the
//     row has a list price, spot where it has a spot price. Rows that sell
//     less than one whole GPU (Azure's NVads A10 v5 partitions) stay in the
//     data but are not offered or listed, since an offer counts whole GPUs.
//   - Every accelerator name in the catalog has an Accelerator entry. A TPU
//     slice name resolves to its chip's entry (tpu-v5litepod-8 →
//     tpu-v5litepod); the catalog sells TPU slices as one device each.
//   - Query is pure and deterministic: ties are broken by a fixed total order
//     over all offer fields, so equal queries give equal results.
//   - Prices are USD per hour as listed: floats for estimates and ranking,
//     never ledger money.
package catalog
