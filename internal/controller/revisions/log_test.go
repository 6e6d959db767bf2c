package revisions

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// set parses a fleet of one sim pool of at most max nodes and one project.
func set(t *testing.T, max int, quota float64) *manifest.Set {
	t.Helper()
	doc := fmt.Sprintf(`apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: gpu}
spec: {provider: sim, instanceTypes: [sim.a100x8], max: %d}
---
apiVersion: gpufleet.dev/v1
kind: Project
metadata: {name: ml}
spec: {quota: {A100: %g}}
`, max, quota)
	s, fe := manifest.Parse([]manifest.Source{{Name: "fleet.yaml", Data: []byte(doc), Format: manifest.YAML}}, manifest.Checks{})
	if len(fe) > 0 {
		t.Fatal(fe)
	}
	return s
}

func revision(n int, s *manifest.Set) *model.Revision {
	docs, digest := s.Documents()
	if docs == nil {
		docs = []json.RawMessage{}
	}
	return &model.Revision{Number: n, CreatedAt: time.Unix(int64(n), 0).UTC(), Digest: digest, Documents: docs}
}

func TestAppendKeepsTheRevisionThatChangedEachSpec(t *testing.T) {
	t.Parallel()
	l, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cur := l.Current(); cur.Revision != nil || cur.Set == nil || l.Number() != 0 {
		t.Fatalf("an empty log declares %+v", cur)
	}
	if _, err := l.Append(revision(1, set(t, 4, 8)), set(t, 4, 8)); err != nil {
		t.Fatal(err)
	}
	d, err := l.Append(revision(2, set(t, 6, 8)), set(t, 6, 8)) // the pool changes, the project does not
	if err != nil {
		t.Fatal(err)
	}
	if d.Pools[0].Revision != 2 || d.Projects[0].Revision != 1 {
		t.Errorf("pool at revision %d (want 2), project at %d (want 1)", d.Pools[0].Revision, d.Projects[0].Revision)
	}
	if _, err := l.Append(revision(2, set(t, 1, 1)), set(t, 1, 1)); !errors.Is(err, model.ErrConflict) {
		t.Errorf("appending a second revision 2: %v, want a conflict", err)
	}
	if _, err := l.Revision(3); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("revision 3: %v, want not found", err)
	}
	revs := l.Revisions()
	if len(revs) != 2 || revs[1].Number != 2 || revs[0].Documents != nil {
		t.Errorf("revisions %+v, want 1 and 2 without documents", revs)
	}
	if r, _ := l.Revision(1); len(r.Documents) == 0 {
		t.Error("Revision(1) lost its documents")
	}
}

func TestLoadRebuildsTheSameDeclaredFleet(t *testing.T) {
	t.Parallel()
	l, _ := Load(nil)
	var stored []*model.Revision
	for i, s := range []*manifest.Set{set(t, 4, 8), set(t, 6, 8), set(t, 6, 2)} {
		r := revision(i+1, s)
		stored = append(stored, r)
		if _, err := l.Append(r, s); err != nil {
			t.Fatal(err)
		}
	}
	again, err := Load(stored)
	if err != nil {
		t.Fatal(err)
	}
	a, b := l.Current(), again.Current()
	if a.Revision.Number != b.Revision.Number || a.Pools[0].Revision != b.Pools[0].Revision || a.Projects[0].Revision != b.Projects[0].Revision {
		t.Errorf("loaded %+v/%+v, appended %+v/%+v", b.Pools[0], b.Projects[0], a.Pools[0], a.Projects[0])
	}
	if _, err := Load([]*model.Revision{stored[1]}); err == nil {
		t.Error("a history starting at revision 2 loaded")
	}
}

func TestReadersDuringAppends(t *testing.T) {
	t.Parallel()
	l, _ := Load(nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 200 {
			cur := l.Current()
			if cur.Revision != nil && len(cur.Pools) != 1 {
				t.Error("a declared fleet without its pool")
			}
			l.Revisions()
		}
	}()
	for n := 1; n <= 50; n++ {
		s := set(t, n, 8)
		if _, err := l.Append(revision(n, s), s); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}
