// Package audit hash-chains the audit log. Each entry's hash is
// SHA-256(previous entry's hash || the entry's canonical JSON without its
// hash), so editing, deleting or reordering a stored entry breaks every hash
// after it; Verify finds the first break. Truncating the newest entries is
// detected only against a head hash recorded elsewhere (Verify's want).
//
// The package is pure: it does no I/O and reads no clock.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Genesis is the PrevHash of the first entry.
const Genesis = ""

// Hash returns the chain hash of e given the hash of the entry before it,
// ignoring e.Hash. encoding/json writes struct fields in declaration order,
// which makes the encoding canonical.
func Hash(prev string, e model.AuditEntry) string {
	e.Hash = ""
	e.PrevHash = prev
	e.Time = e.Time.UTC()
	data, err := json.Marshal(e)
	if err != nil {
		panic(fmt.Sprintf("encoding audit entry: %v", err)) // plain fields always encode
	}
	h := sha256.New()
	h.Write([]byte(prev))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// Link chains e after the entry whose sequence and hash are prevSeq and
// prev: it sets e's Seq, PrevHash and Hash.
func Link(prevSeq uint64, prev string, e *model.AuditEntry) {
	e.Seq = prevSeq + 1
	e.PrevHash = prev
	e.Time = e.Time.UTC()
	e.Hash = Hash(prev, *e)
}

// BrokenError says where a chain fails to verify.
type BrokenError struct {
	Seq    uint64
	Reason string
}

func (e *BrokenError) Error() string {
	return fmt.Sprintf("audit log broken at entry %d: %s", e.Seq, e.Reason)
}

// Verify checks entries, which must be the whole log from the first entry
// in order: sequence numbers without gaps, each PrevHash the hash before
// it, each Hash recomputed. It returns a *BrokenError naming the first
// entry that fails, or nil.
func Verify(entries []*model.AuditEntry) error {
	prevSeq, prev := uint64(0), Genesis
	for _, e := range entries {
		switch {
		case e.Seq != prevSeq+1:
			return &BrokenError{Seq: e.Seq, Reason: fmt.Sprintf("follows entry %d (an entry is missing or out of order)", prevSeq)}
		case e.PrevHash != prev:
			return &BrokenError{Seq: e.Seq, Reason: "its previous hash does not match the entry before it"}
		case Hash(prev, *e) != e.Hash:
			return &BrokenError{Seq: e.Seq, Reason: "its content does not match its hash (edited)"}
		}
		prevSeq, prev = e.Seq, e.Hash
	}
	return nil
}
