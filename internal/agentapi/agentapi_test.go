package agentapi

import (
	"context"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// slowSync is a control plane whose Sync answers only when release is
// closed, or fails with its context's error when cancelled first.
type slowSync struct {
	ControlPlane
	release chan struct{}
}

func (s slowSync) Sync(ctx context.Context, _ SyncRequest) (SyncResponse, error) {
	select {
	case <-s.release:
		return SyncResponse{Generation: 7}, nil
	case <-ctx.Done():
		return SyncResponse{}, ctx.Err()
	}
}

// TestSyncUnlessChanged: a long poll is cut short by a change; a request
// carrying news (no wait) is not, however many changes come, so a busy
// node's reports and heartbeats always reach the server.
func TestSyncUnlessChanged(t *testing.T) {
	for name, tc := range map[string]struct {
		wait      time.Duration
		wantWoken bool
	}{
		"long poll": {wait: time.Minute, wantWoken: true},
		"with news": {wait: 0, wantWoken: false},
	} {
		t.Run(name, func(t *testing.T) {
			cp := slowSync{release: make(chan struct{})}
			changed := make(chan struct{}, 1)
			changed <- struct{}{} // a replica changed while the call was in flight
			done := make(chan struct{})
			var (
				resp  SyncResponse
				woken bool
				err   error
			)
			go func() {
				resp, woken, err = SyncUnlessChanged(context.Background(), cp, SyncRequest{Wait: model.Duration(tc.wait)}, changed)
				close(done)
			}()
			if tc.wantWoken {
				<-done // cancelled by the change: the server never answers
			} else {
				select {
				case <-done:
					t.Fatalf("a request with news ended before the server answered: %v", err)
				case <-time.After(100 * time.Millisecond):
				}
				close(cp.release)
				<-done
			}
			if woken != tc.wantWoken {
				t.Fatalf("woken = %v, want %v (err %v)", woken, tc.wantWoken, err)
			}
			if !tc.wantWoken && (err != nil || resp.Generation != 7) {
				t.Fatalf("a request with news: %+v, %v; want the server's answer", resp, err)
			}
		})
	}
}
