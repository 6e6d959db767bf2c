package objstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/objstore"
	"github.com/gpufleet/gpufleet/internal/s3test"
)

// conformance runs the Store contract against st.
func conformance(t *testing.T, st objstore.Store) {
	ctx := context.Background()
	small := []byte("hello checkpoint")
	big := make([]byte, 11<<20+123) // past two 5 MiB parts: a multipart upload on S3
	rand.Read(big)
	for name, data := range map[string][]byte{"a/small": small, "a/big": big, "b/empty": {}} {
		info, err := st.Put(ctx, name, bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
		sum := sha256.Sum256(data)
		if info.SHA256 != hex.EncodeToString(sum[:]) || info.Size != int64(len(data)) {
			t.Errorf("put %s: info %+v, want size %d sha256 %x", name, info, len(data), sum)
		}
		got := read(t, st, name)
		if !bytes.Equal(got, data) {
			t.Errorf("get %s: %d bytes differ from the %d put", name, len(got), len(data))
		}
		st, err := st.Stat(ctx, name)
		if err != nil || st.Size != int64(len(data)) {
			t.Errorf("stat %s: %+v, %v", name, st, err)
		}
	}
	// Unknown size, past one part.
	if _, err := st.Put(ctx, "c/stream", io.MultiReader(bytes.NewReader(big), bytes.NewReader(small)), -1); err != nil {
		t.Fatalf("put of unknown size: %v", err)
	}
	if got := read(t, st, "c/stream"); len(got) != len(big)+len(small) {
		t.Errorf("streamed object: %d bytes, want %d", len(got), len(big)+len(small))
	}
	var keys []string
	if err := st.List(ctx, "a/", func(i objstore.Info) bool { keys = append(keys, i.Key); return true }); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"a/big", "a/small"}, keys); d != "" {
		t.Errorf("list a/ (-want +got):\n%s", d)
	}
	if _, err := st.Get(ctx, "a/missing"); !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), "a/missing") {
		t.Errorf("get of a missing object: %v, want ErrNotFound naming it", err)
	}
	if _, err := st.Stat(ctx, "a/missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("stat of a missing object: %v, want ErrNotFound", err)
	}
	if err := st.Delete(ctx, "a/small"); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "a/small"); err != nil {
		t.Errorf("second delete: %v, want success", err)
	}
	if _, err := st.Stat(ctx, "a/small"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("stat after delete: %v, want ErrNotFound", err)
	}
	// A reader shorter than the size it claims leaves the old object.
	if _, err := st.Put(ctx, "a/big", bytes.NewReader(small), int64(len(small)+1)); err == nil {
		t.Error("put of a short reader succeeded")
	}
	if got := read(t, st, "a/big"); !bytes.Equal(got, big) {
		t.Error("a failed put replaced the object")
	}
	// A put cancelled midway leaves the old object, whole.
	cctx, cancel := context.WithCancel(ctx)
	r := &cancelAfter{r: bytes.NewReader(make([]byte, 20<<20)), n: 8 << 20, cancel: cancel}
	if _, err := st.Put(cctx, "a/big", r, 20<<20); err == nil {
		t.Error("cancelled put succeeded")
	}
	if got := read(t, st, "a/big"); !bytes.Equal(got, big) {
		t.Error("a cancelled put replaced the object")
	}
}

// cancelAfter cancels its context once n bytes were read.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	if c.n <= 0 {
		c.cancel()
		time.Sleep(10 * time.Millisecond) // let in-flight requests see it
	}
	n, err := c.r.Read(p)
	c.n -= n
	return n, err
}

func read(t *testing.T, st objstore.Store, key string) []byte {
	t.Helper()
	rc, err := st.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	return b
}

func TestDirConformance(t *testing.T) {
	t.Parallel()
	d, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	conformance(t, d)
}

func TestDirMissingFolder(t *testing.T) {
	t.Parallel()
	_, err := objstore.NewDir(filepath.Join(t.TempDir(), "not-mounted"))
	if !errors.Is(err, objstore.ErrNoBucket) {
		t.Errorf("NewDir of a missing folder: %v, want ErrNoBucket", err)
	}
}

func TestDirRejectsEscapingKeys(t *testing.T) {
	t.Parallel()
	d, _ := objstore.NewDir(t.TempDir())
	for _, k := range []string{"../x", "a/../../x", "/abs", "a//b", ""} {
		if _, err := d.Put(context.Background(), k, strings.NewReader("x"), 1); err == nil {
			t.Errorf("put %q succeeded", k)
		}
	}
}

func newS3(t *testing.T, srv *s3test.Server, mod func(*objstore.S3Config)) *objstore.S3 {
	cfg := objstore.S3Config{
		Endpoint: srv.Endpoint, Region: s3test.Region, Bucket: "ckpt", Prefix: "fleet/a",
		PathStyle: true, AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey,
		PartSize: 5 << 20, MaxAttempts: 1,
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := objstore.NewS3(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestS3Conformance(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.CreateBucket(t, "ckpt")
	s := newS3(t, srv, nil)
	if err := s.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	conformance(t, s)
	// The prefix is where the objects are.
	if _, err := os.Stat(filepath.Join(bucket, "fleet", "a", "a", "big")); err != nil {
		t.Errorf("object not under its prefix in the bucket: %v", err)
	}
}

func TestS3Faults(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "ckpt")
	ctx := context.Background()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + l.Addr().String()
	l.Close()
	for name, tc := range map[string]struct {
		mod  func(*objstore.S3Config)
		want error
	}{
		"wrong secret":   {func(c *objstore.S3Config) { c.SecretAccessKey = "wrong-secret-key" }, objstore.ErrAccessDenied},
		"unknown key id": {func(c *objstore.S3Config) { c.AccessKeyID = "nobody" }, objstore.ErrAccessDenied},
		"missing bucket": {func(c *objstore.S3Config) { c.Bucket = "no-such-bucket" }, objstore.ErrNoBucket},
		"unreachable":    {func(c *objstore.S3Config) { c.Endpoint = dead }, objstore.ErrUnreachable},
	} {
		t.Run(name, func(t *testing.T) {
			s := newS3(t, srv, tc.mod)
			_, err := s.Put(ctx, "obj/one", strings.NewReader("x"), 1)
			if !errors.Is(err, tc.want) {
				t.Errorf("put: %v, want %v", err, tc.want)
			}
			if err == nil || !strings.Contains(err.Error(), "obj/one") {
				t.Errorf("put error %v does not name the object", err)
			}
			if strings.Contains(fmtErr(err), "wrong-secret-key") {
				t.Errorf("error reveals the secret: %v", err)
			}
			if err := s.Check(ctx); !errors.Is(err, tc.want) {
				t.Errorf("check: %v, want %v", err, tc.want)
			}
		})
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
