package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agentapi"
)

func TestShipperResumesChunksAndEndsWithEOF(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cp := newFakeControlPlane()
	path := filepath.Join(t.TempDir(), "output.log")
	content := strings.Repeat("0123456789", 5) // 50 bytes
	if err := os.WriteFile(path, []byte(content[:30]), 0o600); err != nil {
		t.Fatal(err)
	}
	// The server already holds the first 12 bytes, from an earlier run.
	if _, err := cp.AppendLog(ctx, agentapi.LogChunk{ReplicaID: "r1", Data: []byte(content[:12])}); err != nil {
		t.Fatal(err)
	}
	s := &shipper{cp: cp, nodeID: "n1", replicaID: "r1", path: path, chunkSize: 4}
	type step struct {
		more bool
		log  fakeLog
	}
	check := func(name string, want step, final bool, burst int) {
		t.Helper()
		more, err := s.ship(ctx, final, burst)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := step{more: more, log: cp.logOf("r1")}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(step{}, fakeLog{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	check("a burst of two chunks", step{more: true, log: fakeLog{data: []byte(content[:20])}}, false, 2)
	check("the rest of the file", step{log: fakeLog{data: []byte(content[:30])}}, false, 0)
	check("nothing new", step{log: fakeLog{data: []byte(content[:30])}}, false, 0)

	cp.setDown(true)
	if more, err := s.ship(ctx, true, 0); err == nil || !more {
		t.Fatalf("ship with the server down = %v, %v; want more and an error", more, err)
	}
	cp.setDown(false)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	check("final", step{log: fakeLog{data: []byte(content), eof: true}}, true, 0)
}

func TestShipperEndsAMissingLogWithEOF(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane()
	s := &shipper{cp: cp, replicaID: "r1", path: filepath.Join(t.TempDir(), "output.log"), chunkSize: 4}
	for _, final := range []bool{false, true} {
		if more, err := s.ship(context.Background(), final, 0); err != nil || more {
			t.Fatalf("ship(final %v) = %v, %v", final, more, err)
		}
	}
	if l := cp.logOf("r1"); len(l.data) != 0 || !l.eof {
		t.Errorf("server log = %q, eof %v; want empty with EOF", l.data, l.eof)
	}
}
