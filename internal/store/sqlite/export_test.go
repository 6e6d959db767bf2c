package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// TestBackupWhileWriting: a backup taken while batches commit is one
// committed state, opens cleanly with its mark beside it, and holds a
// prefix of what was written.
func TestBackupWhileWriting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := openTest(t, Options{})
	const n = 400
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if err := store.Commit(ctx, s, &store.Batch{Jobs: []*model.Job{testJob(fmt.Sprintf("job-%04d", i), uint64(i+1), 1)}, Meta: map[string]string{"last": fmt.Sprint(i)}}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	dest := filepath.Join(t.TempDir(), "backup.db")
	seq, err := Backup(ctx, path, dest)
	<-done
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	fi, err := os.Stat(dest)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v, %v; want mode 0600", fi, err)
	}
	b := reopen(t, dest, Options{}) // refuses a copy below its mark
	d := load(t, b)
	if uint64(len(d.Jobs)) != seq {
		t.Errorf("backup at commit #%d holds %d jobs (one per commit)", seq, len(d.Jobs))
	}
	for i, j := range d.Jobs {
		if want := fmt.Sprintf("job-%04d", i); j.ID != want {
			t.Fatalf("job %d is %s, want %s: not a prefix", i, j.ID, want)
		}
	}
	if len(d.Jobs) > 0 && d.Meta["last"] != fmt.Sprint(len(d.Jobs)-1) {
		t.Errorf("meta last = %q with %d jobs: not one committed state", d.Meta["last"], len(d.Jobs))
	}
	if _, err := Backup(ctx, path, dest); err == nil {
		t.Errorf("Backup over an existing file succeeded")
	}
	full := filepath.Join(t.TempDir(), "full.db")
	if _, err := Backup(ctx, path, full); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(load(t, s), load(t, reopen(t, full, Options{}))); diff != "" {
		t.Errorf("a backup after the writes (-live +backup):\n%s", diff)
	}
}
