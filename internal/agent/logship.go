package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/gpufleet/gpufleet/internal/agentapi"
)

// shipper sends one replica's output.log to the server, continuing from
// where the server's copy ends, so it resumes after errors, reconnects and
// agent restarts without gaps or duplicates. It is used by one goroutine.
type shipper struct {
	cp        agentapi.ControlPlane
	nodeID    string
	replicaID string
	path      string
	chunkSize int64

	offset int64 // where the server's copy ends, once synced
	synced bool
}

// ship sends up to burst chunks (0: no limit) of the output past the
// server's end. final means the replica has ended and the file is complete:
// the last chunk then carries EOF. more reports that output is left to send
// or, when final, that EOF is not yet acknowledged. Each chunk's Data is
// freshly allocated and left to the ControlPlane.
func (s *shipper) ship(ctx context.Context, final bool, burst int) (more bool, err error) {
	if !s.synced {
		// An empty chunk at offset 0 asks where the server's copy ends.
		ack, err := s.send(ctx, agentapi.LogChunk{})
		if err != nil {
			return true, err
		}
		s.offset, s.synced = ack.Size, true
	}
	f, err := os.Open(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Nothing written yet; for an ended replica, never.
	case err != nil:
		return true, fmt.Errorf("opening output: %w", err)
	default:
		defer f.Close()
	}
	for sent := 0; burst == 0 || sent < burst; sent++ {
		data, last, err := s.read(f)
		if err != nil {
			return true, err
		}
		if len(data) == 0 && !final {
			return false, nil
		}
		eof := final && last
		ack, err := s.send(ctx, agentapi.LogChunk{Offset: s.offset, Data: data, EOF: eof})
		if err != nil {
			return true, err
		}
		end := s.offset + int64(len(data))
		if len(data) > 0 && ack.Size == s.offset {
			return true, fmt.Errorf("appending output at offset %d: server stored none of it", s.offset)
		}
		s.offset = ack.Size
		if last && ack.Size >= end {
			return false, nil
		}
	}
	return true, nil
}

// read returns the next chunk past the server's end from f (nil: no file),
// and whether it reaches the end of what the file holds now.
func (s *shipper) read(f *os.File) (data []byte, last bool, err error) {
	if f == nil {
		return nil, true, nil
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("reading output: %w", err)
	}
	n := min(max(fi.Size()-s.offset, 0), s.chunkSize)
	data = make([]byte, n)
	if _, err := f.ReadAt(data, s.offset); err != nil {
		return nil, false, fmt.Errorf("reading output: %w", err)
	}
	return data, s.offset+n >= fi.Size(), nil
}

func (s *shipper) send(ctx context.Context, c agentapi.LogChunk) (agentapi.LogAck, error) {
	c.NodeID, c.ReplicaID = s.nodeID, s.replicaID
	ack, err := s.cp.AppendLog(ctx, c)
	if err != nil {
		return agentapi.LogAck{}, fmt.Errorf("appending output at offset %d: %w", c.Offset, err)
	}
	return ack, nil
}
