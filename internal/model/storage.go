package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
)

// Storage declares object storage, where a pool's jobs keep their
// checkpoints (DESIGN.md §7, docs/storage.md): an S3-compatible bucket or a
// folder every node of the pool mounts. Credentials are never written here:
// S3.CredentialsRef names a sealed secret. A manifest may also give it as a
// string, "s3://BUCKET/PREFIX" or an absolute path (the form accepted
// before storage blocks).
type Storage struct {
	S3 *S3Storage `json:"s3,omitempty"`
	// Path is an absolute folder on a filesystem shared by the pool's
	// nodes (NFS, a cluster filesystem).
	Path string `json:"path,omitempty"`
}

// S3Storage addresses an S3-compatible bucket.
type S3Storage struct {
	Bucket string `json:"bucket"`
	// Prefix is put before every object of the pool ("team-a/ckpt").
	Prefix string `json:"prefix,omitempty"`
	// Endpoint is the service's base URL; empty means AWS S3 in Region.
	Endpoint string `json:"endpoint,omitempty"`
	// Region defaults to us-east-1.
	Region string `json:"region,omitempty"`
	// PathStyle addresses ENDPOINT/BUCKET/KEY (most self-hosted servers).
	PathStyle bool `json:"pathStyle,omitempty"`
	// CredentialsRef names the sealed secret ("project/NAME") whose value
	// is "ACCESS_KEY_ID:SECRET_ACCESS_KEY"; empty means the node's own AWS
	// credentials (environment, instance role).
	CredentialsRef SecretRef `json:"credentialsRef,omitempty"`
}

// UnmarshalJSON accepts the block or the string form, and rejects unknown
// fields in the block.
func (s *Storage) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = ParseStorage(v)
		return nil
	}
	type plain Storage
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var p plain
	if err := d.Decode(&p); err != nil {
		return fmt.Errorf("want {s3: {bucket, prefix, endpoint, region, pathStyle, credentialsRef}} or {path}: %w", err)
	}
	*s = Storage(p)
	return nil
}

// ParseStorage reads the string form: "s3://BUCKET/PREFIX" or a path.
func ParseStorage(v string) Storage {
	if rest, ok := strings.CutPrefix(v, "s3://"); ok {
		bucket, prefix, _ := strings.Cut(rest, "/")
		return Storage{S3: &S3Storage{Bucket: bucket, Prefix: prefix}}
	}
	return Storage{Path: v}
}

// String describes s without secrets: "s3://bucket/prefix" or its path.
func (s Storage) String() string {
	if s.S3 != nil {
		return "s3://" + path.Join(s.S3.Bucket, s.S3.Prefix)
	}
	return s.Path
}

// bucketRE is S3's bucket naming rule (3 to 63 characters).
var bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// Validate reports every problem in s with paths under prefix.
func (s *Storage) Validate(prefix string) FieldErrors {
	var fe FieldErrors
	switch {
	case s.S3 != nil && s.Path != "":
		fe.Add(prefix, "set s3 or path, not both")
	case s.S3 == nil && s.Path == "":
		fe.Add(prefix, "set s3 (a bucket) or path (a shared folder)")
	}
	if s.Path != "" && (!path.IsAbs(s.Path) || path.Clean(s.Path) != s.Path) {
		fe.Add(prefix+".path", fmt.Sprintf("%q must be an absolute, clean path (or s3://BUCKET/PREFIX)", s.Path))
	}
	if b := s.S3; b != nil {
		p := prefix + ".s3"
		if !bucketRE.MatchString(b.Bucket) {
			fe.Add(p+".bucket", fmt.Sprintf("%q must be 3 to 63 lower-case letters, digits, dots and dashes", b.Bucket))
		}
		if b.Prefix != "" {
			for _, seg := range strings.Split(strings.Trim(b.Prefix, "/"), "/") {
				if seg == "" || seg == "." || seg == ".." {
					fe.Add(p+".prefix", fmt.Sprintf("%q must not have empty, '.' or '..' segments", b.Prefix))
					break
				}
			}
		}
		if b.Endpoint != "" {
			u, err := url.Parse(b.Endpoint)
			switch {
			case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
				fe.Add(p+".endpoint", fmt.Sprintf("%q must be an http(s) URL such as https://s3.example.com", b.Endpoint))
			case u.User != nil:
				fe.Add(p+".endpoint", "must not hold credentials: name a sealed secret in credentialsRef")
			}
		}
		if b.CredentialsRef != "" {
			if msg := b.CredentialsRef.Validate(); msg != "" {
				fe.Add(p+".credentialsRef", msg)
			}
		}
	}
	return fe
}

// DataKeySecret is the reserved secret of a project that holds its data
// key (hex), which seals the project's checkpoints in object storage. The
// server creates it on first use; it is sealed, listed and resealed like
// every secret, and cannot be deleted (its checkpoints would be lost).
const DataKeySecret = "GPUFLEET_DATA_KEY"
