package objstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/objstore"
	"github.com/gpufleet/gpufleet/internal/s3test"
)

// condConformance checks ListAfter's pages and DeleteIfMatch's refusal of
// an object written again since it was seen.
func condConformance(t *testing.T, st objstore.Store) {
	ctx := context.Background()
	put := func(k, v string) objstore.Info {
		t.Helper()
		if _, err := st.Put(ctx, k, strings.NewReader(v), int64(len(v))); err != nil {
			t.Fatal(err)
		}
		i, err := st.Stat(ctx, k)
		if err != nil || i.ETag == "" {
			t.Fatalf("stat %s: %+v %v (want an ETag)", k, i, err)
		}
		return i
	}
	for i := range 25 {
		put(fmt.Sprintf("w/k%02d", i), "x")
	}
	put("w/a/1", "nested") // sorts first; a Dir skips its folder once past it
	put("w/a/2", "nested")
	put("z", "outside")
	var got []string
	cursor, pages := "", 0
	for {
		more, err := objstore.ListAfter(ctx, st, "w/", cursor, 10, func(i objstore.Info) bool {
			got = append(got, i.Key)
			cursor = i.Key
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if !more {
			break
		}
	}
	if len(got) != 27 || got[0] != "w/a/1" || got[2] != "w/k00" || got[26] != "w/k24" || pages != 3 {
		t.Errorf("paged listing: %d keys in %d pages (%v…), want 27 in 3", len(got), pages, got[:min(3, len(got))])
	}

	old := put("obj", "first")
	time.Sleep(10 * time.Millisecond) // a Dir's ETag is its modification time
	put("obj", "FIRST")               // written again, as an upload that found it too old (sealing salts each write: other bytes)
	if ok, err := objstore.DeleteIfMatch(ctx, st, "obj", old.ETag); ok || err != nil {
		t.Fatalf("delete of an object written again since: deleted %v, %v", ok, err)
	}
	cur, err := st.Stat(ctx, "obj")
	if err != nil {
		t.Fatalf("the newer object is gone: %v", err)
	}
	if ok, err := objstore.DeleteIfMatch(ctx, st, "obj", cur.ETag); !ok || err != nil {
		t.Fatalf("delete of the object seen: deleted %v, %v", ok, err)
	}
	if _, err := st.Stat(ctx, "obj"); err == nil {
		t.Error("object still there after a matching delete")
	}
	if _, err := objstore.DeleteIfMatch(ctx, st, "obj", cur.ETag); err != nil {
		t.Errorf("delete of a missing object: %v", err)
	}
}

func TestDirConditional(t *testing.T) {
	t.Parallel()
	d, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	condConformance(t, d)
}

func TestS3Conditional(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "ckpt")
	condConformance(t, newS3(t, srv, nil))
}
