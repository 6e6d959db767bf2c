package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDataSourceValidation(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		data []DataSource
		want []string // field paths with a problem
	}{
		"s3 and storage": {data: []DataSource{{Source: "s3://my-bucket/imagenet/", Path: "data/"}, {Source: "storage:lake/text", Path: "text"}}},
		"whole bucket":   {data: []DataSource{{Source: "s3://my-bucket", Path: "d"}}},
		"bad scheme":     {data: []DataSource{{Source: "gs://b/p", Path: "d"}}, want: []string{"spec.data[0].source"}},
		"bad bucket":     {data: []DataSource{{Source: "s3://B/p", Path: "d"}}, want: []string{"spec.data[0].source"}},
		"bad storage":    {data: []DataSource{{Source: "storage:Bad_Name/p", Path: "d"}}, want: []string{"spec.data[0].source"}},
		"dot-dot prefix": {data: []DataSource{{Source: "s3://bucket/a/../b", Path: "d"}}, want: []string{"spec.data[0].source"}},
		"absolute path":  {data: []DataSource{{Source: "s3://bucket/a", Path: "/data"}}, want: []string{"spec.data[0].path"}},
		"escaping path":  {data: []DataSource{{Source: "s3://bucket/a", Path: "../data"}}, want: []string{"spec.data[0].path"}},
		"unclean path":   {data: []DataSource{{Source: "s3://bucket/a", Path: "a//b"}}, want: []string{"spec.data[0].path"}},
		"empty path":     {data: []DataSource{{Source: "s3://bucket/a", Path: ""}}, want: []string{"spec.data[0].path"}},
		"dot path":       {data: []DataSource{{Source: "s3://bucket/a", Path: "./"}}, want: []string{"spec.data[0].path"}},
		"overlap":        {data: []DataSource{{Source: "s3://bucket/a", Path: "data"}, {Source: "s3://bucket/b", Path: "data/b"}}, want: []string{"spec.data[1].path"}},
		"same path":      {data: []DataSource{{Source: "s3://bucket/a", Path: "data/"}, {Source: "s3://bucket/b", Path: "data"}}, want: []string{"spec.data[1].path"}},
		"rw mode":        {data: []DataSource{{Source: "s3://bucket/a", Path: "d", Mode: "rw"}}, want: []string{"spec.data[0].mode"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := JobSpec{Resources: Resources{GPUs: 1}, Run: RunSpec{Command: []string{"true"}}, Data: tc.data}
			s.Default()
			var got []string
			for _, e := range s.Validate("spec", nil) {
				got = append(got, e.Path)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("field paths (-want +got):\n%s", diff)
			}
			for _, d := range s.Data {
				if d.Mode == "" {
					t.Errorf("Default left mode empty")
				}
			}
		})
	}
}

func TestDataDigestNamesProjectAndSource(t *testing.T) {
	t.Parallel()
	a, _ := ParseDataSource("s3://bucket/imagenet/")
	b, _ := ParseDataSource("s3://bucket/imagenet")
	c, _ := ParseDataSource("storage:bucket/imagenet")
	if DataDigest("nlp", a) != DataDigest("nlp", b) {
		t.Error("a trailing slash changed the digest")
	}
	if DataDigest("nlp", a) == DataDigest("vision", a) {
		t.Error("two projects share a digest: cached data would be shared between them")
	}
	if DataDigest("nlp", a) == DataDigest("nlp", c) {
		t.Error("s3:// and storage: sources share a digest")
	}
}

func TestProjectStorageValidation(t *testing.T) {
	t.Parallel()
	s := ProjectSpec{Storage: map[string]Storage{
		"lake":  {S3: &S3Storage{Bucket: "lake", CredentialsRef: "nlp/S3"}},
		"Bad_1": {Path: "relative"},
	}}
	var got []string
	for _, e := range s.Validate("spec", nil) {
		got = append(got, e.Path)
	}
	want := []string{"spec.storage.Bad_1", "spec.storage.Bad_1.path"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("field paths (-want +got):\n%s", diff)
	}
}
