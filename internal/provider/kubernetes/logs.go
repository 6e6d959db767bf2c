package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpufleet/gpufleet/internal/agentapi"
)

// logTries is how often the log of an ended replica is tried before
// gpufleet gives up on it and closes the log.
const logTries = 3

// shipper streams one replica's pod log to the control plane through the
// API server, continuing from where the server's copy ends, so it resumes
// after errors and restarts without gaps or duplicates. Its errors never
// hold up status: it runs on its own goroutine, and at most LogStreams
// stream at once.
type shipper struct {
	c         *Cluster
	cp        agentapi.ControlPlane
	nodeID    string
	replicaID string
	pod       string // "" when the replica never had a pod: only EOF is sent
	wake      func()
	done      atomic.Bool
	// podEnd is rung when the replica ends, so a shipper waiting out a
	// failed stream reads the tail at once.
	podEnd chan struct{}

	offset int64 // where the server's copy ends; -1 until asked
}

// ship starts shipping r's log.
func (r *runner) ship(v *vnode, rep *replica) *shipper {
	job := rep.job
	s := &shipper{c: r.c, cp: r.cp, nodeID: v.id, replicaID: rep.id, pod: rep.podName, offset: -1, wake: func() { v.touch("", job) },
		podEnd: make(chan struct{}, 1)}
	r.loops.Go(func() { s.run(r, v) })
	return s
}

// replicaEnded tells the shipper that its replica ended. Safe for
// concurrent use.
func (s *shipper) replicaEnded() { ring(s.podEnd) }

// finished reports whether the whole log was sent or given up on.
func (s *shipper) finished() bool { return s.done.Load() }

// ended reports whether the pod can write no more: it finished or is gone.
func (s *shipper) ended() bool {
	p := s.c.pod(s.pod)
	return p == nil || !active(p)
}

func (s *shipper) run(r *runner, v *vnode) {
	ctx := v.ctx
	defer func() {
		s.done.Store(true)
		s.wake()
	}()
	backoff := s.c.backoff(10 * s.c.opts.MaxRetryBackoff)
	failures := 0
	for ctx.Err() == nil {
		select {
		case r.logSlots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		finished, err := s.pass(ctx)
		<-r.logSlots
		if finished {
			return
		}
		wait := backoff.Step()
		if err != nil {
			failures++
			v.log.Debug("shipping pod log", "replica_id", s.replicaID, "pod", s.pod, "err", err)
			ended := s.ended()
			if ended && failures >= logTries {
				v.log.Warn("giving up on a pod's log", "replica_id", s.replicaID, "pod", s.pod, "err", err)
				if _, err := s.send(ctx, agentapi.LogChunk{Offset: max(s.offset, 0), EOF: true}); err == nil {
					return
				}
			}
			if !ended {
				// Following failed while the pod runs: try again when it
				// ends (its tail is all that is left) or after the
				// longest back-off, not on every short one.
				wait = s.c.opts.MaxRetryBackoff
			}
		} else if s.ended() {
			continue // the pod ended during a followed stream: read its tail
		}
		if !s.sleepUnlessEnded(ctx, wait) {
			return
		}
	}
}

// sleepUnlessEnded waits d, or less if the replica ends first (once); false
// means ctx ended.
func (s *shipper) sleepUnlessEnded(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-s.podEnd:
		return true
	case <-s.c.opts.Clock.After(d):
		return true
	}
}

// pass sends what the pod's log holds past the server's end: all of it
// when the pod has ended (then EOF, and finished), else following it until
// the stream ends.
func (s *shipper) pass(ctx context.Context) (finished bool, err error) {
	if s.offset < 0 {
		// An empty chunk at offset 0 asks where the server's copy ends.
		ack, err := s.send(ctx, agentapi.LogChunk{})
		if err != nil {
			return false, err
		}
		if ack.Complete {
			return true, nil // shipped before a restart, or not wanted
		}
		s.offset = ack.Size
	}
	final := s.ended()
	if s.pod != "" {
		if err := s.stream(ctx, !final); err != nil {
			return false, err
		}
	}
	if !final {
		return false, nil
	}
	_, err = s.send(ctx, agentapi.LogChunk{Offset: s.offset, EOF: true})
	return err == nil, err
}

// stream reads the pod's log from its start, skips what the server holds
// and sends the rest.
func (s *shipper) stream(ctx context.Context, follow bool) error {
	req := s.c.opts.Client.CoreV1().Pods(s.c.opts.Settings.Namespace).GetLogs(s.pod, &corev1.PodLogOptions{Container: ContainerName, Follow: follow})
	rc, err := req.Stream(ctx)
	if err != nil {
		return fmt.Errorf("opening log of pod %s: %w", s.pod, err)
	}
	defer rc.Close()
	if _, err := io.CopyN(io.Discard, rc, s.offset); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // shorter than what the server holds (rotated): nothing new
		}
		return fmt.Errorf("reading log of pod %s: %w", s.pod, err)
	}
	buf := make([]byte, s.c.opts.LogChunkSize)
	for {
		n, rerr := io.ReadAtLeast(rc, buf, 1)
		if n > 0 {
			data := make([]byte, n) // the ControlPlane may keep it
			copy(data, buf[:n])
			ack, err := s.send(ctx, agentapi.LogChunk{Offset: s.offset, Data: data})
			if err != nil {
				return err
			}
			if want := s.offset + int64(n); ack.Size != want {
				// The server holds another length: read again from there.
				s.offset = ack.Size
				return fmt.Errorf("log of pod %s: the server holds %d bytes, not %d", s.pod, ack.Size, want)
			}
			s.offset = ack.Size
		}
		switch {
		case rerr == nil:
		case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrUnexpectedEOF):
			return nil
		default:
			return fmt.Errorf("reading log of pod %s: %w", s.pod, rerr)
		}
	}
}

func (s *shipper) send(ctx context.Context, c agentapi.LogChunk) (agentapi.LogAck, error) {
	c.NodeID, c.ReplicaID = s.nodeID, s.replicaID
	ack, err := s.cp.AppendLog(ctx, c)
	if err != nil {
		return agentapi.LogAck{}, fmt.Errorf("appending log at offset %d: %w", c.Offset, err)
	}
	return ack, nil
}
