package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// S3Config configures an S3-compatible bucket. Zero fields take the
// defaults noted.
type S3Config struct {
	// Endpoint is the service's base URL (http://127.0.0.1:7070 for a
	// local gateway); empty means AWS's endpoint for Region.
	Endpoint string
	// Region is the bucket's region (default us-east-1).
	Region string
	// Bucket names the bucket; it must exist (ErrNoBucket otherwise).
	Bucket string
	// Prefix is put before every key ("team-a/ckpt"); a trailing slash is
	// added.
	Prefix string
	// PathStyle addresses the bucket as ENDPOINT/BUCKET/KEY rather than
	// BUCKET.ENDPOINT/KEY (gateways and most self-hosted servers need it).
	PathStyle bool
	// AccessKeyID and SecretAccessKey are the static credentials (opened
	// from a sealed secret by the caller; never from a manifest). Empty:
	// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
	AccessKeyID, SecretAccessKey, SessionToken string
	// PartSize is the size of a multipart upload's parts, and the largest
	// object sent in one PutObject (default 16 MiB, at least 5 MiB).
	PartSize int64
	// Concurrency is how many parts of one object are uploaded at once
	// (default 4).
	Concurrency int
	// MaxAttempts bounds the SDK's retries of one request, with its
	// exponential back-off (default 3).
	MaxAttempts int
	// HTTPClient, when set, is used for requests (tests; custom TLS).
	HTTPClient *http.Client
}

// Default sizes for S3.
const (
	DefaultPartSize = 16 << 20
	minPartSize     = 5 << 20
)

// S3 is a Store in an S3-compatible bucket.
type S3 struct {
	cfg    S3Config
	client *s3.Client
	desc   string
}

var _ Store = (*S3)(nil)

// NewS3 returns a Store for cfg. It does not contact the service; the first
// request reports an unreachable endpoint, wrong credentials or a missing
// bucket (Check does so at once).
func NewS3(cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3 storage: bucket must be set")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.PartSize < minPartSize {
		return nil, fmt.Errorf("s3 storage: part size %d is below S3's minimum of %d", cfg.PartSize, minPartSize)
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 3
	}
	cfg.Prefix = strings.Trim(cfg.Prefix, "/")
	if cfg.Prefix != "" {
		cfg.Prefix += "/"
	}
	opts := s3.Options{
		Region:       cfg.Region,
		UsePathStyle: cfg.PathStyle,
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = cfg.MaxAttempts
			o.MaxBackoff = 5 * time.Second
		}),
	}
	if cfg.AccessKeyID == "" {
		// The node's own credentials, from the environment (instance
		// roles are not read).
		cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), os.Getenv("AWS_SESSION_TOKEN")
	}
	if cfg.AccessKeyID != "" {
		opts.Credentials = credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)
	}
	if cfg.Endpoint != "" {
		opts.BaseEndpoint = aws.String(cfg.Endpoint)
	}
	if cfg.HTTPClient != nil {
		opts.HTTPClient = cfg.HTTPClient
	}
	return &S3{cfg: cfg, client: s3.New(opts), desc: "s3://" + cfg.Bucket + "/" + strings.TrimSuffix(cfg.Prefix, "/")}, nil
}

func (s *S3) String() string { return s.desc }

// Check makes one request to the bucket, so that wrong settings are
// reported before any work depends on them.
func (s *S3) Check(ctx context.Context) error {
	// A listing, not HeadBucket: its error has a body whose code tells a
	// missing bucket from an unknown access key (both 404 on some servers).
	_, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(s.cfg.Prefix), MaxKeys: aws.Int32(1)})
	if err != nil {
		return s.fail("check", "", err)
	}
	return nil
}

func (s *S3) key(k string) *string { return aws.String(s.cfg.Prefix + k) }

// fail names the object and classifies err.
func (s *S3) fail(op, key string, err error) error {
	var kind error
	var api smithy.APIError
	var resp *smithyhttp.ResponseError
	var netErr net.Error
	switch {
	case errors.As(err, &api) && (api.ErrorCode() == "NoSuchBucket"):
		kind = ErrNoBucket
	case errors.As(err, &api) && (api.ErrorCode() == "NoSuchKey" || api.ErrorCode() == "NotFound"):
		kind = ErrNotFound
	case errors.As(err, &api) && (api.ErrorCode() == "AccessDenied" || api.ErrorCode() == "InvalidAccessKeyId" ||
		api.ErrorCode() == "SignatureDoesNotMatch" || api.ErrorCode() == "Forbidden" ||
		api.ErrorCode() == "XAdminUserNotFound"): // versitygw: no such access key
		kind = ErrAccessDenied
	case errors.As(err, &resp) && resp.HTTPStatusCode() == http.StatusForbidden:
		kind = ErrAccessDenied
	case errors.As(err, &resp) && resp.HTTPStatusCode() == http.StatusNotFound:
		kind = ErrNotFound
	case errors.As(err, &netErr) && ctxErr(err) == nil:
		kind = ErrUnreachable
	}
	if kind != nil {
		err = fmt.Errorf("%w: %w", kind, err)
	}
	return &ObjectError{Op: op, Store: s.desc, Key: key, Err: err}
}

// ctxErr returns the context error err wraps, if any.
func ctxErr(err error) error {
	if errors.Is(err, context.Canceled) {
		return context.Canceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return nil
}

// Put implements Store: objects up to PartSize go in one PutObject, larger
// ones (or ones of unknown size past PartSize) in a multipart upload that
// is aborted on any failure, so no partial object appears.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) (Info, error) {
	if err := CheckKey(key); err != nil {
		return Info{}, &ObjectError{Op: "put", Store: s.desc, Key: key, Err: err}
	}
	h := sha256.New()
	tr := io.TeeReader(r, h)
	// A small object of known size is read into a buffer of its size (one
	// extra byte shows a reader longer than it said), not a whole part.
	bufLen := s.cfg.PartSize
	if size >= 0 && size < bufLen {
		bufLen = size + 1
	}
	first := make([]byte, bufLen)
	n, err := io.ReadFull(tr, first)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return Info{}, s.fail("put", key, err)
	}
	if int64(n) < s.cfg.PartSize {
		if size >= 0 && int64(n) > size {
			return Info{}, s.fail("put", key, fmt.Errorf("read more than the %d bytes said", size))
		}
		if size >= 0 && int64(n) != size {
			return Info{}, s.fail("put", key, fmt.Errorf("read %d bytes, want %d", n, size))
		}
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket:        aws.String(s.cfg.Bucket),
			Key:           s.key(key),
			Body:          bytes.NewReader(first[:n]),
			ContentLength: aws.Int64(int64(n)),
		})
		if err != nil {
			return Info{}, s.fail("put", key, err)
		}
		return Info{Key: key, Size: int64(n), SHA256: hex.EncodeToString(h.Sum(nil))}, nil
	}
	total, err := s.multipart(ctx, key, first, tr, size)
	if err != nil {
		return Info{}, err
	}
	return Info{Key: key, Size: total, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// multipart uploads first and the rest of r as the parts of one object,
// Concurrency parts at a time. A length other than size (when size >= 0)
// aborts the upload before it completes.
func (s *S3) multipart(ctx context.Context, key string, first []byte, r io.Reader, size int64) (int64, error) {
	up, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s.cfg.Bucket), Key: s.key(key)})
	if err != nil {
		return 0, s.fail("put", key, err)
	}
	ok := false
	defer func() {
		if !ok {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: aws.String(s.cfg.Bucket), Key: s.key(key), UploadId: up.UploadId})
			cancel()
		}
	}()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		parts    []types.CompletedPart
		firstErr error
		wg       sync.WaitGroup
	)
	bufs := make(chan []byte, s.cfg.Concurrency)
	for range s.cfg.Concurrency - 1 {
		bufs <- make([]byte, s.cfg.PartSize)
	}
	var total int64
	buf, n := first, len(first)
	for num := int32(1); ; num++ {
		total += int64(n)
		part, body := num, buf[:n]
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := s.client.UploadPart(pctx, &s3.UploadPartInput{
				Bucket: aws.String(s.cfg.Bucket), Key: s.key(key), UploadId: up.UploadId,
				PartNumber: aws.Int32(part), Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
			})
			mu.Lock()
			if err != nil && firstErr == nil {
				firstErr = err
				cancel()
			}
			if err == nil {
				parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(part), ETag: out.ETag,
					ChecksumCRC32: out.ChecksumCRC32, ChecksumCRC32C: out.ChecksumCRC32C, ChecksumCRC64NVME: out.ChecksumCRC64NVME,
					ChecksumSHA1: out.ChecksumSHA1, ChecksumSHA256: out.ChecksumSHA256})
			}
			mu.Unlock()
			bufs <- body[:cap(body)]
		}()
		var next []byte
		select {
		case next = <-bufs:
		case <-pctx.Done():
		}
		if next == nil {
			break
		}
		var rerr error
		n, rerr = io.ReadFull(r, next)
		if rerr != nil && !errors.Is(rerr, io.ErrUnexpectedEOF) && !errors.Is(rerr, io.EOF) {
			mu.Lock()
			if firstErr == nil {
				firstErr = rerr
			}
			mu.Unlock()
			break
		}
		if n == 0 {
			break
		}
		buf = next
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	if firstErr == nil && size >= 0 && total != size {
		firstErr = fmt.Errorf("read %d bytes, want %d", total, size)
	}
	if firstErr != nil {
		return 0, s.fail("put", key, firstErr)
	}
	sortParts(parts)
	_, err = s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(s.cfg.Bucket), Key: s.key(key), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil {
		return 0, s.fail("put", key, err)
	}
	ok = true
	return total, nil
}

func sortParts(p []types.CompletedPart) {
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && *p[j].PartNumber < *p[j-1].PartNumber; j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
}

// Get implements Store.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: s.key(key)})
	if err != nil {
		return nil, s.fail("get", key, err)
	}
	return out.Body, nil
}

// Stat implements Store.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: s.key(key)})
	if err != nil {
		return Info{}, s.fail("stat", key, err)
	}
	return Info{Key: key, Size: aws.ToInt64(out.ContentLength), Modified: aws.ToTime(out.LastModified), ETag: aws.ToString(out.ETag)}, nil
}

// List implements Store.
func (s *S3) List(ctx context.Context, prefix string, fn func(Info) bool) error {
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(s.cfg.Prefix + prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return s.fail("list", prefix, err)
		}
		for _, o := range page.Contents {
			if !fn(Info{Key: strings.TrimPrefix(aws.ToString(o.Key), s.cfg.Prefix), Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified), ETag: aws.ToString(o.ETag)}) {
				return nil
			}
		}
	}
	return nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: s.key(key)})
	if err != nil {
		e := s.fail("delete", key, err)
		if errors.Is(e, ErrNotFound) {
			return nil
		}
		return e
	}
	return nil
}
