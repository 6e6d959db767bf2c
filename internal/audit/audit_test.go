package audit

import (
	"errors"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

func chain(n int) []*model.AuditEntry {
	var out []*model.AuditEntry
	seq, prev := uint64(0), Genesis
	for i := range n {
		e := &model.AuditEntry{Time: time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC), Actor: "ada", Action: "POST /v1/jobs", Object: "j-1", Result: 201}
		Link(seq, prev, e)
		seq, prev = e.Seq, e.Hash
		out = append(out, e)
	}
	return out
}

func TestVerify(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		tamper  func([]*model.AuditEntry) []*model.AuditEntry
		wantSeq uint64 // 0: intact
	}{
		"intact":        {tamper: func(es []*model.AuditEntry) []*model.AuditEntry { return es }},
		"edited result": {tamper: func(es []*model.AuditEntry) []*model.AuditEntry { es[2].Result = 200; return es }, wantSeq: 3},
		"edited actor":  {tamper: func(es []*model.AuditEntry) []*model.AuditEntry { es[0].Actor = "eve"; return es }, wantSeq: 1},
		"deleted entry": {tamper: func(es []*model.AuditEntry) []*model.AuditEntry { return append(es[:1], es[2:]...) }, wantSeq: 3},
		"rehashed entry": {tamper: func(es []*model.AuditEntry) []*model.AuditEntry {
			es[1].Actor = "eve"
			es[1].Hash = Hash(es[1].PrevHash, *es[1])
			return es
		}, wantSeq: 3},
		"swapped entries": {tamper: func(es []*model.AuditEntry) []*model.AuditEntry { es[1], es[2] = es[2], es[1]; return es }, wantSeq: 3},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := Verify(tc.tamper(chain(5)))
			var broken *BrokenError
			switch {
			case tc.wantSeq == 0 && err != nil:
				t.Fatalf("Verify = %v, want nil", err)
			case tc.wantSeq != 0 && (!errors.As(err, &broken) || broken.Seq != tc.wantSeq):
				t.Fatalf("Verify = %v, want a break at entry %d", err, tc.wantSeq)
			}
		})
	}
}
