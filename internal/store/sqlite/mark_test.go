package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func commitJobs(t *testing.T, s *Store, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		commit(t, s, &store.Batch{Jobs: []*model.Job{testJob(fmt.Sprintf("job-%d", i), uint64(i+1), 1)}})
	}
}

// TestLostWritesRefused: a database that holds fewer commits than were
// acknowledged — its WAL lost, an older copy restored, the file removed —
// is refused at Open, naming how many commits are gone, and reported by
// Check; AcceptLostWrites opens it anyway, after which it opens cleanly.
func TestLostWritesRefused(t *testing.T) {
	t.Parallel()
	type outcome struct {
		Acknowledged, Found uint64
		Problems            int
	}
	cases := map[string]struct {
		// damage leaves a damaged database at path, whose writer
		// acknowledged 5 commits.
		damage func(t *testing.T, path string)
		want   outcome
	}{
		"WAL lost": {
			damage: func(t *testing.T, path string) {
				orig := filepath.Join(t.TempDir(), "gpufleet.db")
				s := reopen(t, orig, Options{})
				commitJobs(t, s, 0, 2)
				if err := s.Close(); err != nil { // checkpointed: 2 commits in the file
					t.Fatal(err)
				}
				s = reopen(t, orig, Options{})
				commitJobs(t, s, 2, 3) // in the WAL only, while s stays open
				copyFile(t, orig, path)
				copyFile(t, orig+MarkSuffix, path+MarkSuffix)
			},
			want: outcome{Acknowledged: 5, Found: 2, Problems: 1},
		},
		"WAL lost before the first checkpoint": {
			damage: func(t *testing.T, path string) {
				orig := filepath.Join(t.TempDir(), "gpufleet.db")
				s := reopen(t, orig, Options{})
				commitJobs(t, s, 0, 5) // the schema too is only in the WAL
				copyFile(t, orig, path)
				copyFile(t, orig+MarkSuffix, path+MarkSuffix)
			},
			want: outcome{Acknowledged: 5, Found: 0, Problems: 1},
		},
		"older copy restored": {
			damage: func(t *testing.T, path string) {
				s := reopen(t, path, Options{})
				commitJobs(t, s, 0, 1)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				old := filepath.Join(t.TempDir(), "old.db")
				copyFile(t, path, old)
				s = reopen(t, path, Options{})
				commitJobs(t, s, 1, 4)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				copyFile(t, old, path)
			},
			want: outcome{Acknowledged: 5, Found: 1, Problems: 1},
		},
		"database removed": {
			damage: func(t *testing.T, path string) {
				s := reopen(t, path, Options{})
				commitJobs(t, s, 0, 5)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				for _, f := range []string{path, path + "-wal", path + "-shm"} {
					if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
						t.Fatal(err)
					}
				}
				s = reopen(t, path, Options{AcceptLostWrites: true}) // a new, empty database
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				// ... and its mark put back from a backup.
				if err := os.WriteFile(path+MarkSuffix, fmt.Appendf(nil, markLine, 5, 0), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			want: outcome{Acknowledged: 5, Found: 0, Problems: 1},
		},
		"healthy": {
			damage: func(t *testing.T, path string) {
				s := reopen(t, path, Options{})
				commitJobs(t, s, 0, 5)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			},
			want: outcome{Acknowledged: 5, Found: 5},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "gpufleet.db")
			tc.damage(t, path)

			rep, err := Check(context.Background(), path)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			got := outcome{Acknowledged: rep.Mark, Found: rep.Commits, Problems: len(rep.Problems)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("Check (-want +got):\n%s\nproblems: %q", diff, rep.Problems)
			}

			s, err := Open(context.Background(), path, Options{})
			if tc.want.Problems == 0 {
				if err != nil {
					t.Fatalf("Open of a healthy database: %v", err)
				}
				s.Close()
				return
			}
			var lost *LostWritesError
			if !errors.As(err, &lost) || !errors.Is(err, ErrLostWrites) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("Open = %v, want a LostWritesError", err)
			}
			if diff := cmp.Diff(tc.want, outcome{Acknowledged: lost.Acknowledged, Found: lost.Found, Problems: 1}); diff != "" {
				t.Fatalf("LostWritesError (-want +got):\n%s", diff)
			}

			s = reopen(t, path, Options{AcceptLostWrites: true})
			if got := len(load(t, s).Jobs); uint64(got) != tc.want.Found {
				t.Fatalf("jobs after accepting the loss = %d, want the %d the database holds", got, tc.want.Found)
			}
			commitJobs(t, s, 100, 1)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = reopen(t, path, Options{}) // the loss was accepted: the mark followed the database
			s.Close()
		})
	}
}
