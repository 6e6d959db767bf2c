package datacache

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpufleet/gpufleet/internal/objstore"
)

// FetchOptions tune Fetch.
type FetchOptions struct {
	// Workers is how many objects are fetched at once (0: 4).
	Workers int
	// Bytes, when set, counts the bytes written as they arrive.
	Bytes *atomic.Int64
	// Progress, when set, is called every 250 ms and once at the end with
	// the bytes written and the dataset's total.
	Progress func(done, total int64)
}

// Fetch downloads every object of ds into dir, an existing folder, and
// verifies each against its listing (size, a plain ETag's MD5, a listed
// SHA-256). Errors name ds.Source and the object at fault: ErrCorrupt for
// bytes that do not match, ErrUnsafeKey for a key that is no relative
// path, ErrFull for a full disk. On error dir holds a partial download the
// caller removes. The cache fills its entries with it; a Kubernetes pod's
// data container (package podsync) fills its volume with it.
func Fetch(ctx context.Context, ds Dataset, dir string, opt FetchOptions) error {
	if opt.Workers <= 0 {
		opt.Workers = 4
	}
	if opt.Bytes == nil {
		opt.Bytes = new(atomic.Int64)
	}
	var total int64
	for _, o := range ds.Objects {
		if _, err := safeKey(o.Key); err != nil {
			return fmt.Errorf("%s: object %q: %w", ds.Source, o.Key, err)
		}
		total += o.Size
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan objstore.Info)
	errs := make(chan error, opt.Workers)
	var wg sync.WaitGroup
	for range opt.Workers {
		wg.Go(func() {
			for o := range jobs {
				if err := fetchObject(dctx, ds, dir, o, opt.Bytes); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
	stopTick := make(chan struct{})
	tickDone := make(chan struct{})
	go func() {
		defer close(tickDone)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopTick:
				return
			case <-t.C:
				if opt.Progress != nil {
					opt.Progress(opt.Bytes.Load(), total)
				}
			}
		}
	}()
feed:
	for _, o := range ds.Objects {
		select {
		case jobs <- o:
		case <-dctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	close(stopTick)
	<-tickDone
	select {
	case err := <-errs:
		return err
	default:
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: download cut short: %w", ds.Source, err)
	}
	if opt.Progress != nil {
		opt.Progress(opt.Bytes.Load(), total)
	}
	return nil
}

// fetchObject downloads one object into dir and checks its size and
// checksums.
func fetchObject(ctx context.Context, ds Dataset, dir string, o objstore.Info, n *atomic.Int64) error {
	rel, _ := safeKey(o.Key)
	if rel == "" {
		return nil // a folder marker ("dir/")
	}
	dst := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return diskError(ds, o, dir, err)
	}
	r, err := ds.Open(ctx, o.Key)
	if err != nil {
		return fmt.Errorf("%s: object %q: %w", ds.Source, o.Key, err)
	}
	defer r.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return diskError(ds, o, dir, err)
	}
	defer out.Close()
	md, sh := md5.New(), sha256.New()
	w := io.MultiWriter(out, md, sh, countWriter{n})
	got, err := io.Copy(w, io.LimitReader(r, o.Size+1))
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: object %q: %w", ds.Source, o.Key, ctx.Err())
		}
		var pe *fs.PathError
		if errors.As(err, &pe) || errors.Is(err, syscall.ENOSPC) {
			return diskError(ds, o, dir, err)
		}
		return fmt.Errorf("%s: reading object %q: %w", ds.Source, o.Key, err)
	}
	if got != o.Size {
		return fmt.Errorf("%s: object %q: %w (%d bytes listed, %d read)", ds.Source, o.Key, ErrCorrupt, o.Size, got)
	}
	if et := strings.Trim(o.ETag, `"`); plainMD5(et) && hex.EncodeToString(md.Sum(nil)) != strings.ToLower(et) {
		return fmt.Errorf("%s: object %q: %w (MD5 differs from its ETag)", ds.Source, o.Key, ErrCorrupt)
	}
	if o.SHA256 != "" && hex.EncodeToString(sh.Sum(nil)) != strings.ToLower(o.SHA256) {
		return fmt.Errorf("%s: object %q: %w (SHA-256 differs)", ds.Source, o.Key, ErrCorrupt)
	}
	if err := out.Sync(); err != nil {
		return diskError(ds, o, dir, err)
	}
	if err := out.Close(); err != nil {
		return diskError(ds, o, dir, err)
	}
	return nil
}

// diskError reports a local write failure; a full disk is ErrFull.
func diskError(ds Dataset, o objstore.Info, dir string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%s: writing object %q into %s: %w: the disk is full (%v)", ds.Source, o.Key, dir, ErrFull, err)
	}
	return fmt.Errorf("%s: writing object %q into %s: %w", ds.Source, o.Key, dir, err)
}

type countWriter struct{ n *atomic.Int64 }

func (w countWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

func plainMD5(s string) bool {
	if len(s) != 32 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
