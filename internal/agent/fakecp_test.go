package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// fakeControlPlane is a hand-written server for agent tests: it serves a
// desired set the test controls (with a real long poll), records
// registrations, statuses and logs, and can be taken down.
type fakeControlPlane struct {
	mu       sync.Mutex
	down     bool
	archives map[string][]byte // by content address
	// unknownNode makes Sync answer ErrUnknownNode until the next Register,
	// as a server does that lost its state or gave the node up for lost.
	unknownNode bool
	failures    int // calls refused while down
	// stalled makes Sync hold the call without answering until its
	// context ends, as a frozen server does.
	stalled bool
	// lostAfter is the heartbeat timeout the server tells the agent.
	lostAfter time.Duration
	gen       uint64
	desired   []agentapi.ReplicaSpec
	changed   chan struct{} // closed when the desired set changes
	regs      []agentapi.Registration
	syncs     []agentapi.SyncRequest
	latest    map[string]agentapi.ReplicaStatus
	logs      map[string]*fakeLog
	// logAtEnd is each replica's log as the server held it when the
	// replica's end was first reported.
	logAtEnd map[string]fakeLog
	// logsHeld, while set, holds AppendLog calls unanswered until it is
	// closed, as a server that does not answer them does; logsWaiting
	// counts the calls it holds.
	logsHeld    chan struct{}
	logsWaiting int
}

type fakeLog struct {
	data []byte
	eof  bool
}

var _ agentapi.ControlPlane = (*fakeControlPlane)(nil)

func newFakeControlPlane() *fakeControlPlane {
	return &fakeControlPlane{
		gen:      1,
		changed:  make(chan struct{}),
		latest:   map[string]agentapi.ReplicaStatus{},
		logs:     map[string]*fakeLog{},
		logAtEnd: map[string]fakeLog{},
	}
}

var errDown = errors.New("server down")

func (f *fakeControlPlane) Register(ctx context.Context, r agentapi.Registration) (agentapi.RegisterResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		f.failures++
		return agentapi.RegisterResponse{}, errDown
	}
	f.regs = append(f.regs, r)
	f.unknownNode = false
	id := r.NodeID
	if id == "" {
		id = fmt.Sprintf("node-%d", len(f.regs))
	}
	return agentapi.RegisterResponse{NodeID: id, HeartbeatTimeout: model.Duration(f.lostAfter)}, nil
}

func (f *fakeControlPlane) Sync(ctx context.Context, req agentapi.SyncRequest) (agentapi.SyncResponse, error) {
	f.mu.Lock()
	if f.down {
		f.failures++
		f.mu.Unlock()
		return agentapi.SyncResponse{}, errDown
	}
	if f.unknownNode {
		f.mu.Unlock()
		return agentapi.SyncResponse{}, fmt.Errorf("node %s: %w", req.NodeID, agentapi.ErrUnknownNode)
	}
	if f.stalled {
		f.mu.Unlock()
		<-ctx.Done()
		return agentapi.SyncResponse{}, ctx.Err()
	}
	f.syncs = append(f.syncs, req)
	for _, s := range req.Statuses {
		f.latest[s.ID] = s
		if ended(s.Phase) {
			if _, ok := f.logAtEnd[s.ID]; !ok {
				l := f.log(s.ID)
				f.logAtEnd[s.ID] = fakeLog{data: slices.Clone(l.data), eof: l.eof}
			}
		}
	}
	if req.Generation == f.gen && req.Wait > 0 {
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-changed:
		case <-time.After(req.Wait.D()):
		case <-ctx.Done():
			return agentapi.SyncResponse{}, ctx.Err()
		}
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	return agentapi.SyncResponse{Generation: f.gen, Replicas: slices.Clone(f.desired), HeartbeatTimeout: model.Duration(f.lostAfter)}, nil
}

func (f *fakeControlPlane) AppendLog(ctx context.Context, c agentapi.LogChunk) (agentapi.LogAck, error) {
	f.mu.Lock()
	if held := f.logsHeld; held != nil {
		f.logsWaiting++
		f.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
		}
		f.mu.Lock()
		f.logsWaiting--
		if err := ctx.Err(); err != nil {
			f.mu.Unlock()
			return agentapi.LogAck{}, err
		}
	}
	defer f.mu.Unlock()
	if f.down {
		f.failures++
		return agentapi.LogAck{}, errDown
	}
	l := f.log(c.ReplicaID)
	have := int64(len(l.data))
	if c.Offset <= have {
		if skip := have - c.Offset; int64(len(c.Data)) > skip {
			l.data = append(l.data, c.Data[skip:]...)
		}
		if c.EOF && c.Offset+int64(len(c.Data)) == int64(len(l.data)) {
			l.eof = true
		}
	}
	return agentapi.LogAck{Size: int64(len(l.data))}, nil
}

// FetchArchive serves the archives a test put in archives.
func (f *fakeControlPlane) FetchArchive(_ context.Context, digest string) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, ok := f.archives[digest]
	if !ok {
		return nil, fmt.Errorf("archive %s: not found", digest)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (f *fakeControlPlane) log(id string) *fakeLog {
	l, ok := f.logs[id]
	if !ok {
		l = &fakeLog{}
		f.logs[id] = l
	}
	return l
}

// setDesired replaces the desired set and ends pending long polls.
func (f *fakeControlPlane) setDesired(specs ...agentapi.ReplicaSpec) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.desired = specs
	f.gen++
	close(f.changed)
	f.changed = make(chan struct{})
}

// forgetNode makes the server refuse syncs until the node registers again.
func (f *fakeControlPlane) forgetNode() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unknownNode = true
	close(f.changed) // end a pending long poll
	f.changed = make(chan struct{})
}

// setStalled makes Sync hold calls without answering (or answer again).
func (f *fakeControlPlane) setStalled(stalled bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stalled = stalled
	close(f.changed) // end a pending long poll: the next call stalls
	f.changed = make(chan struct{})
}

// holdLogs holds AppendLog calls until the returned release is called.
func (f *fakeControlPlane) holdLogs() (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	held := make(chan struct{})
	f.logsHeld = held
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.logsHeld = nil
		close(held)
	}
}

// heldLogs is how many AppendLog calls are being held.
func (f *fakeControlPlane) heldLogs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logsWaiting
}

// syncsSince returns the sync requests after the first n.
func (f *fakeControlPlane) syncsSince(n int) []agentapi.SyncRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.syncs[min(n, len(f.syncs)):])
}

func (f *fakeControlPlane) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// status returns the latest status reported for id.
func (f *fakeControlPlane) status(id string) (agentapi.ReplicaStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.latest[id]
	return s, ok
}

// forget drops what the server knows of id's status, as if never reported.
func (f *fakeControlPlane) forget(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.latest, id)
	delete(f.logAtEnd, id)
}

func (f *fakeControlPlane) logOf(id string) fakeLog {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.log(id)
	return fakeLog{data: slices.Clone(l.data), eof: l.eof}
}

func (f *fakeControlPlane) endLog(id string) (fakeLog, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.logAtEnd[id]
	return l, ok
}

func (f *fakeControlPlane) registrations() []agentapi.Registration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.regs)
}

func (f *fakeControlPlane) failed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failures
}

// syncCount is how many syncs the server has answered or is answering.
func (f *fakeControlPlane) syncCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.syncs)
}

// lastSync returns the latest sync request.
func (f *fakeControlPlane) lastSync() agentapi.SyncRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.syncs) == 0 {
		return agentapi.SyncRequest{}
	}
	return f.syncs[len(f.syncs)-1]
}
