package api_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/model"
)

// headersSeen is a RoundTripper that reports when a response's headers have
// arrived, so a test knows a streaming request is being served.
type headersSeen struct {
	next http.RoundTripper
	once sync.Once
	ch   chan struct{}
}

func (h *headersSeen) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.next.RoundTrip(r)
	h.once.Do(func() { close(h.ch) })
	return resp, err
}

// chunks are a replica's output: text, a partial line, bytes that are not
// UTF-8, a NUL, CRLF, and a chunk larger than one read buffer.
var chunks = [][]byte{
	[]byte("epoch 1/3 loss=2.31\n"),
	[]byte("epoch 2/3 loss=1.87 (partial"),
	{0xff, 0xfe, 0x00, '\r', '\n'},
	bytes.Repeat([]byte("0123456789abcdef"), 4096+1),
	[]byte("done\n"),
}

// TestLogs plays a replica that runs and writes its output in chunks, read
// back with the client: once streaming while it arrives, and once whole
// after the replica has exited.
func TestLogs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	admin := client.New(e.http.URL, e.admin, nil)

	view, err := admin.SubmitJob(ctx, jobManifest("logs"), client.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := view.ID
	agent := e.registerNode(t, 1)
	rep := agent.waitReplicas(t, 1)[0]
	jobToken := rep.Env["GPUFLEET_JOB_TOKEN"]
	agent.report(t, runningStatus(rep.ID))
	e.waitJob(t, id, model.JobRunning)

	// Follow, as the job itself would with its token, before any output.
	seen := &headersSeen{next: http.DefaultTransport, ch: make(chan struct{})}
	follower := client.New(e.http.URL, jobToken, &http.Client{Transport: seen})
	pr, pw := io.Pipe()
	type result struct {
		attempt int
		err     error
	}
	followed := make(chan result, 1)
	go func() {
		attempt, err := follower.Logs(ctx, id, client.LogOptions{Follow: true}, pw)
		pw.Close()
		followed <- result{attempt, err}
	}()
	select {
	case <-seen.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the follow request got no response headers in 10s")
	}

	var want []byte
	var offset int64
	for i, c := range chunks {
		eof := i == len(chunks)-1
		ack, err := e.ctrl.AppendLog(ctx, agentapi.LogChunk{NodeID: agent.node, ReplicaID: rep.ID, Offset: offset, Data: c, EOF: eof})
		if err != nil {
			t.Fatalf("appending chunk %d: %v", i, err)
		}
		offset += int64(len(c))
		if ack.Size != offset {
			t.Fatalf("chunk %d acknowledged at %d, want %d", i, ack.Size, offset)
		}
		want = append(want, c...)
		// Each chunk reaches the follower before the next is written: the
		// stream is live, not buffered until the end.
		got := make([]byte, len(c))
		if _, err := io.ReadFull(pr, got); err != nil {
			t.Fatalf("reading chunk %d from the stream: %v", i, err)
		}
		if !bytes.Equal(got, c) {
			t.Fatalf("chunk %d streamed as %q…, want %q…", i, head(got), head(c))
		}
	}
	// The stream ends once the end of the log is stored, before the replica
	// has even reported its exit.
	if rest, err := io.ReadAll(pr); err != nil || len(rest) != 0 {
		t.Fatalf("after the last chunk the stream had %d more bytes, err %v", len(rest), err)
	}
	select {
	case r := <-followed:
		if r.err != nil || r.attempt != 1 {
			t.Fatalf("following returned attempt %d, err %v; want attempt 1", r.attempt, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the followed stream did not end after the log was complete")
	}

	agent.report(t, exitedStatus(rep.ID, 0))
	e.waitJob(t, id, model.JobSucceeded)

	tests := map[string]struct {
		opts client.LogOptions
		want []byte
	}{
		"whole":               {client.LogOptions{}, want},
		"first attempt":       {client.LogOptions{Attempt: 1}, want},
		"from an offset":      {client.LogOptions{Offset: 20}, want[20:]},
		"follow a full log":   {client.LogOptions{Follow: true}, want},
		"offset past the end": {client.LogOptions{Offset: int64(len(want)) + 10}, []byte{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			attempt, err := admin.Logs(ctx, id, tc.opts, &buf)
			if err != nil {
				t.Fatal(err)
			}
			if attempt != 1 {
				t.Errorf("attempt = %d, want 1", attempt)
			}
			if !bytes.Equal(buf.Bytes(), tc.want) {
				t.Errorf("log is %d bytes %q…, want %d bytes %q…", buf.Len(), head(buf.Bytes()), len(tc.want), head(tc.want))
			}
		})
	}

	errs := map[string]struct {
		opts client.LogOptions
		want int
	}{
		"attempt that never ran": {client.LogOptions{Attempt: 2}, http.StatusNotFound},
		"rank out of range":      {client.LogOptions{Rank: 1}, http.StatusBadRequest},
	}
	for name, tc := range errs {
		t.Run(name, func(t *testing.T) {
			_, err := admin.Logs(ctx, id, tc.opts, io.Discard)
			if got := client.StatusOf(err); got != tc.want {
				t.Errorf("status = %d (%v), want %d", got, err, tc.want)
			}
		})
	}

	// The job has ended, so its token has been revoked.
	_, err = follower.Job(ctx, id)
	if diff := cmp.Diff(http.StatusUnauthorized, client.StatusOf(err)); diff != "" {
		t.Errorf("job token after the job ended (-want +got):\n%s", diff)
	}
}

// TestLogsFollowQueuedJob follows a job before it has started: the stream
// waits for the first attempt and ends with its log.
func TestLogsFollowQueuedJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	admin := client.New(e.http.URL, e.admin, nil)
	view, err := admin.SubmitJob(ctx, jobManifest("queued"), client.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	followed := make(chan error, 1)
	// The request usually arrives before the node registers below; if not,
	// it finds the attempt at once and the result is the same.
	go func() {
		_, err := admin.Logs(ctx, view.ID, client.LogOptions{Follow: true}, &buf)
		followed <- err
	}()

	agent := e.registerNode(t, 1)
	rep := agent.waitReplicas(t, 1)[0]
	agent.report(t, runningStatus(rep.ID))
	// An empty chunk asks what the server holds: nothing yet, then all.
	query := agentapi.LogChunk{NodeID: agent.node, ReplicaID: rep.ID}
	if ack, err := e.ctrl.AppendLog(ctx, query); err != nil || ack.Size != 0 || ack.Complete {
		t.Fatalf("query before any output = %+v, %v; want size 0, incomplete", ack, err)
	}
	ack, err := e.ctrl.AppendLog(ctx, agentapi.LogChunk{NodeID: agent.node, ReplicaID: rep.ID, Data: []byte("hello\n"), EOF: true})
	if err != nil || ack.Size != 6 || !ack.Complete {
		t.Fatalf("last chunk = %+v, %v; want size 6, complete", ack, err)
	}
	if ack, err := e.ctrl.AppendLog(ctx, query); err != nil || ack.Size != 6 || !ack.Complete {
		t.Fatalf("query after EOF = %+v, %v; want size 6, complete", ack, err)
	}
	select {
	case err := <-followed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the followed stream did not end")
	}
	if diff := cmp.Diff("hello\n", buf.String()); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
}

func head(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}
