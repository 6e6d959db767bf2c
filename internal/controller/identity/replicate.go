package identity

import (
	"encoding/hex"

	"github.com/gpufleet/gpufleet/internal/store"
)

// Replicate applies tokens and grants another replica committed (b, from
// the store's change feed) with the store's rules: a revoked token stays
// revoked. A follower's read-only controller calls it; a leader never
// does (it made those writes itself).
func (id *Identity) Replicate(b *store.Batch) {
	if len(b.Tokens)+len(b.Grants)+len(b.DeleteGrants) == 0 {
		return
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	for _, t := range b.Tokens {
		old, ok := id.byID[t.ID]
		if ok && old.Revoked {
			continue
		}
		if ok {
			delete(id.byHash, hex.EncodeToString(old.Hash))
		}
		id.putLocked(t)
	}
	for _, g := range b.Grants {
		id.grants[grantKey{g.User, g.Project}] = g
	}
	for _, k := range b.DeleteGrants {
		delete(id.grants, grantKey{k.User, k.Project})
	}
}
