package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Errors callers branch on; every error of a Store wraps one of these where
// it applies.
var (
	// ErrNotFound: no object has the key.
	ErrNotFound = errors.New("object not found")
	// ErrNoBucket: the bucket (or the folder of a Dir store) does not exist.
	ErrNoBucket = errors.New("bucket does not exist")
	// ErrAccessDenied: the credentials are wrong or lack permission.
	ErrAccessDenied = errors.New("access denied (check the storage's credentials)")
	// ErrUnreachable: the storage's endpoint could not be reached.
	ErrUnreachable = errors.New("storage unreachable")
)

// Info describes a stored object.
type Info struct {
	Key  string
	Size int64
	// SHA256 is the hex SHA-256 of the stored bytes, where the store
	// computed it (Put always does; List and Stat may leave it empty).
	SHA256   string
	Modified time.Time
	// ETag is the store's entity tag (List and Stat give it): S3's (the
	// MD5 of the content for an object not uploaded in parts), or a Dir's
	// modification time. It changes when the object is written again,
	// even with the same plaintext (sealing salts every write).
	ETag string
}

// Store is a flat namespace of immutable-once-written objects under
// slash-separated keys. Implementations are safe for concurrent use.
type Store interface {
	// Put stores size bytes read from r under key, replacing any object
	// there, atomically: the key names the old object or the whole new one,
	// never a part. size must be the exact length of r (-1: unknown, which
	// a backend may buffer). It returns the stored object's Info with its
	// SHA-256. A cancelled ctx leaves no new object behind.
	Put(ctx context.Context, key string, r io.Reader, size int64) (Info, error)
	// Get opens the object under key; the caller closes it. ErrNotFound
	// when there is none.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat describes the object under key; ErrNotFound when there is none.
	Stat(ctx context.Context, key string) (Info, error)
	// List calls fn for every object whose key starts with prefix, in key
	// order, until fn returns false.
	List(ctx context.Context, prefix string, fn func(Info) bool) error
	// Delete removes the object under key; deleting a missing object
	// succeeds (idempotent).
	Delete(ctx context.Context, key string) error
}

// ObjectError names the object an operation failed on.
type ObjectError struct {
	Op    string // "put", "get", "stat", "list", "delete"
	Store string // the store's description: "s3://bucket/prefix" or a path
	Key   string
	Err   error
}

func (e *ObjectError) Error() string {
	return fmt.Sprintf("%s %s/%s: %v", e.Op, e.Store, e.Key, e.Err)
}

func (e *ObjectError) Unwrap() error { return e.Err }

// Credentials are static S3 credentials; empty fields mean the
// environment's (AWS_ACCESS_KEY_ID…, or an instance role).
type Credentials struct {
	AccessKeyID, SecretAccessKey string
}

// Open returns the Store that s declares.
func Open(ctx context.Context, s model.Storage, creds Credentials) (Store, error) {
	switch {
	case s.S3 != nil:
		return NewS3(S3Config{
			Endpoint: s.S3.Endpoint, Region: s.S3.Region, Bucket: s.S3.Bucket, Prefix: s.S3.Prefix, PathStyle: s.S3.PathStyle,
			AccessKeyID: creds.AccessKeyID, SecretAccessKey: creds.SecretAccessKey,
		})
	case s.Path != "":
		return NewDir(s.Path)
	}
	return nil, errors.New("storage declares neither s3 nor path")
}
