package objstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// Pager is a Store that lists from a key on, a bounded page at a time, so
// that a long walk over a bucket can stop and resume later (S3's
// StartAfter).
type Pager interface {
	// ListAfter calls fn, in key order, for at most limit objects whose
	// key starts with prefix and sorts after after, until fn returns
	// false. It reports whether more objects follow the last one given.
	ListAfter(ctx context.Context, prefix, after string, limit int, fn func(Info) bool) (more bool, err error)
}

// CondDeleter is a Store that deletes an object only while it is the one
// seen: when the key has been written again since (another ETag), the
// delete does nothing.
type CondDeleter interface {
	// DeleteIfMatch removes the object under key when its ETag is etag;
	// it reports false when the ETag differs. A missing object is not an
	// error (S3 servers differ on whether that reports true).
	DeleteIfMatch(ctx context.Context, key, etag string) (bool, error)
}

// ListAfter lists like Pager.ListAfter on any Store (walking from the
// start where st is no Pager).
func ListAfter(ctx context.Context, st Store, prefix, after string, limit int, fn func(Info) bool) (bool, error) {
	if p, ok := st.(Pager); ok {
		return p.ListAfter(ctx, prefix, after, limit, fn)
	}
	n, more := 0, false
	err := st.List(ctx, prefix, func(i Info) bool {
		if i.Key <= after {
			return true
		}
		if n == limit {
			more = true
			return false
		}
		n++
		return fn(i)
	})
	return more, err
}

// ErrNoCondDelete: the store cannot delete conditionally.
var ErrNoCondDelete = errors.New("store cannot delete conditionally")

// DeleteIfMatch deletes like CondDeleter.DeleteIfMatch, failing with
// ErrNoCondDelete where st cannot: a collector must not fall back to an
// unconditional delete, which could remove an object written again since.
func DeleteIfMatch(ctx context.Context, st Store, key, etag string) (bool, error) {
	if etag == "" {
		return false, &ObjectError{Op: "delete", Key: key, Err: errors.New("no ETag to match")}
	}
	if d, ok := st.(CondDeleter); ok {
		return d.DeleteIfMatch(ctx, key, etag)
	}
	return false, &ObjectError{Op: "delete", Key: key, Err: ErrNoCondDelete}
}

// ListAfter implements Pager with one ListObjectsV2 request per 1,000 keys.
func (s *S3) ListAfter(ctx context.Context, prefix, after string, limit int, fn func(Info) bool) (bool, error) {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(s.cfg.Prefix + prefix)}
	if after != "" {
		in.StartAfter = aws.String(s.cfg.Prefix + after)
	}
	n := 0
	for n < limit {
		in.MaxKeys = aws.Int32(int32(min(limit-n, 1000)))
		page, err := s.client.ListObjectsV2(ctx, in)
		if err != nil {
			return false, s.fail("list", prefix, err)
		}
		for _, o := range page.Contents {
			n++
			if !fn(Info{Key: strings.TrimPrefix(aws.ToString(o.Key), s.cfg.Prefix), Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified), ETag: aws.ToString(o.ETag)}) {
				return true, nil
			}
		}
		if !aws.ToBool(page.IsTruncated) || page.NextContinuationToken == nil {
			return false, nil
		}
		in.StartAfter, in.ContinuationToken = nil, page.NextContinuationToken
	}
	return true, nil
}

// DeleteIfMatch implements CondDeleter with DeleteObject's If-Match
// (conditional deletes: AWS S3 and versitygw answer 412 when the ETag
// differs).
func (s *S3) DeleteIfMatch(ctx context.Context, key, etag string) (bool, error) {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: s.key(key), IfMatch: aws.String(etag)})
	if err == nil {
		return true, nil
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && (ae.ErrorCode() == "PreconditionFailed" || ae.ErrorCode() == "412") {
		return false, nil
	}
	e := s.fail("delete", key, err)
	if errors.Is(e, ErrNotFound) {
		return false, nil
	}
	return false, e
}

// dirETag is a Dir object's entity tag: its modification time, which a
// Put (a rename of a new file) changes.
func dirETag(fi fs.FileInfo) string { return fmt.Sprintf("mtime-%d", fi.ModTime().UnixNano()) }

// ListAfter implements Pager.
func (d *Dir) ListAfter(ctx context.Context, prefix, after string, limit int, fn func(Info) bool) (bool, error) {
	n, more := 0, false
	err := d.list(ctx, prefix, after, func(i Info) bool {
		if i.Key <= after {
			return true
		}
		if n == limit {
			more = true
			return false
		}
		n++
		if !fn(i) {
			more = true
			return false
		}
		return true
	})
	return more, err
}

// DeleteIfMatch implements CondDeleter: the file is renamed aside
// (atomic), compared, and linked back without replacing when another Put
// had replaced it in between.
func (d *Dir) DeleteIfMatch(ctx context.Context, key, etag string) (bool, error) {
	p, err := d.path("delete", key)
	if err != nil {
		return false, err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, d.fail("delete", key, err)
	}
	if dirETag(fi) != etag {
		return false, nil
	}
	aside := filepath.Join(filepath.Dir(p), tmpPrefix+"gc-"+filepath.Base(p))
	if err := os.Rename(p, aside); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, d.fail("delete", key, err)
	}
	if fi, err := os.Stat(aside); err == nil && dirETag(fi) != etag {
		// Written again between the look and the rename: put it back,
		// unless a newer one is there already (same content, its name).
		if err := os.Link(aside, p); err != nil && !errors.Is(err, fs.ErrExist) {
			return false, d.fail("delete", key, err)
		}
		os.Remove(aside)
		return false, nil
	}
	if err := os.Remove(aside); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, d.fail("delete", key, err)
	}
	return true, d.Delete(ctx, key) // prunes empty folders
}
