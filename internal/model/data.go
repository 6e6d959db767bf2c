package model

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strings"
)

// DataSource is a dataset a job reads (docs/datasets.md): before an attempt
// starts, each of its nodes downloads the objects under Source into its
// data cache (or finds them there), and the job sees them read-only at
// Path, relative to its working directory.
type DataSource struct {
	// Source is "s3://BUCKET/PREFIX" (AWS S3, the node's own credentials)
	// or "storage:NAME/PREFIX", a storage the job's project declares
	// (Project spec.storage.NAME, credentials by sealed reference).
	Source string `json:"source"`
	// Path is where the job finds the data, relative to its working
	// directory ("data/", "datasets/imagenet").
	Path string `json:"path"`
	// Mode is "ro", the only mode for now (the default).
	Mode string `json:"mode,omitempty"`
}

// DataReadOnly is DataSource.Mode for read-only data.
const DataReadOnly = "ro"

// MaxDataSources bounds spec.data.
const MaxDataSources = 16

// DataLocation is a parsed DataSource.Source.
type DataLocation struct {
	// Storage is the project storage's name, or "" for s3://.
	Storage string
	// Bucket is the s3:// form's bucket.
	Bucket string
	// Prefix is the folder under the bucket or storage, without slashes
	// at either end ("" for all of it).
	Prefix string
}

// ParseDataSource reads a source: "s3://BUCKET/PREFIX" or
// "storage:NAME/PREFIX".
func ParseDataSource(src string) (DataLocation, error) {
	var loc DataLocation
	rest := ""
	switch {
	case strings.HasPrefix(src, "s3://"):
		rest = strings.TrimPrefix(src, "s3://")
		loc.Bucket, rest, _ = strings.Cut(rest, "/")
		if !bucketRE.MatchString(loc.Bucket) {
			return loc, fmt.Errorf("%q: bucket %q must be 3 to 63 lower-case letters, digits, dots and dashes", src, loc.Bucket)
		}
	case strings.HasPrefix(src, "storage:"):
		rest = strings.TrimPrefix(src, "storage:")
		loc.Storage, rest, _ = strings.Cut(rest, "/")
		if !ValidName(loc.Storage) {
			return loc, fmt.Errorf("%q: storage name %q must be lower-case letters, digits and dashes (a storage the project declares in spec.storage)", src, loc.Storage)
		}
	default:
		return loc, fmt.Errorf("%q must be s3://BUCKET/PREFIX or storage:NAME/PREFIX", src)
	}
	loc.Prefix = strings.Trim(rest, "/")
	if loc.Prefix != "" {
		for _, seg := range strings.Split(loc.Prefix, "/") {
			if seg == "" || seg == "." || seg == ".." {
				return loc, fmt.Errorf("%q: the prefix must not have empty, '.' or '..' segments", src)
			}
		}
	}
	if strings.ContainsAny(src, "\x00\n") {
		return loc, fmt.Errorf("%q must not hold control characters", src)
	}
	return loc, nil
}

// String is the source in its canonical form (no trailing slash).
func (l DataLocation) String() string {
	head := "s3://" + l.Bucket
	if l.Storage != "" {
		head = "storage:" + l.Storage
	}
	if l.Prefix == "" {
		return head
	}
	return head + "/" + l.Prefix
}

// DataDigest names a dataset of a project: the hex SHA-256 of the project
// and the canonical source. Nodes report the digests of the datasets their
// cache holds, and the scheduler prefers, for a job, the nodes that hold
// its datasets. A project's name is part of it because cached data is
// never shared between projects (docs/datasets.md).
func DataDigest(project string, loc DataLocation) string {
	h := sha256.Sum256([]byte(project + "\x00" + loc.String()))
	return hex.EncodeToString(h[:])
}

// DataDigests are the digests of s's datasets for a job of project; nil
// without any (or with a source that does not parse: Validate reports it).
func (s *JobSpec) DataDigests(project string) []string {
	var out []string
	for _, d := range s.Data {
		if loc, err := ParseDataSource(d.Source); err == nil {
			out = append(out, DataDigest(project, loc))
		}
	}
	return out
}

func (s *JobSpec) defaultData() {
	for i := range s.Data {
		if s.Data[i].Mode == "" {
			s.Data[i].Mode = DataReadOnly
		}
	}
}

// validateData reports the problems of spec.data under p.
func (s *JobSpec) validateData(p string, fe *FieldErrors) {
	if len(s.Data) > MaxDataSources {
		fe.Add(p, fmt.Sprintf("at most %d datasets per job", MaxDataSources))
	}
	paths := map[string]int{}
	for i, d := range s.Data {
		f := fmt.Sprintf("%s[%d]", p, i)
		if _, err := ParseDataSource(d.Source); err != nil {
			fe.Add(f+".source", err.Error())
		}
		switch m := d.Mode; m {
		case "", DataReadOnly:
		default:
			fe.Add(f+".mode", fmt.Sprintf("%q: only ro (read-only) is supported", m))
		}
		rel := strings.TrimSuffix(d.Path, "/")
		switch {
		case rel == "" || rel == ".":
			fe.Add(f+".path", "must name a folder under the job's working directory, such as data/")
			continue
		case strings.ContainsAny(rel, "\x00\n\\"):
			fe.Add(f+".path", "must not hold NUL, newline or backslash")
			continue
		case path.IsAbs(rel):
			fe.Add(f+".path", fmt.Sprintf("%q must be relative to the job's working directory (data/, not /data)", d.Path))
			continue
		case rel != path.Clean(rel) || rel == ".." || strings.HasPrefix(rel, "../"):
			fe.Add(f+".path", fmt.Sprintf("%q must be a clean path inside the job's working directory", d.Path))
			continue
		}
		for q, j := range paths {
			if q == rel || strings.HasPrefix(rel, q+"/") || strings.HasPrefix(q, rel+"/") {
				fe.Add(f+".path", fmt.Sprintf("%q overlaps spec.data[%d].path", d.Path, j))
			}
		}
		paths[rel] = i
	}
}

// CleanDataPath is a validated DataSource.Path without its trailing slash.
func CleanDataPath(p string) string { return strings.TrimSuffix(p, "/") }
