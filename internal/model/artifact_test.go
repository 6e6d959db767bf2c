package model

import (
	"slices"
	"testing"
)

func TestArtifactPolicyFieldPaths(t *testing.T) {
	s := ProjectSpec{Artifacts: &ArtifactPolicy{
		Storage:         &Storage{S3: &S3Storage{Bucket: "Bad_Bucket"}},
		KeepCheckpoints: -1, KeepVersions: -2, KeepTags: []string{"release", "Not OK"},
	}}
	var got []string
	for _, e := range s.Validate("spec", nil) {
		got = append(got, e.Path)
	}
	want := []string{"spec.artifacts.storage.s3.bucket", "spec.artifacts.keepCheckpoints", "spec.artifacts.keepVersions", "spec.artifacts.keepTags[1]"}
	if !slices.Equal(got, want) {
		t.Errorf("paths %q, want %q", got, want)
	}
	var nilPolicy *ArtifactPolicy
	if !nilPolicy.Kept([]string{"x", ReleaseTag}) || nilPolicy.Kept([]string{"x"}) {
		t.Error("without keepTags, release (only) is kept")
	}
	if (&ArtifactPolicy{KeepTags: []string{}}).Kept([]string{ReleaseTag}) {
		t.Error("keepTags: [] keeps no tag")
	}
	for name, bad := range map[string]bool{"resnet50": false, "j-123": true, "Big": true, "": true} {
		if got := CheckArtifactName(name) != ""; got != bad {
			t.Errorf("CheckArtifactName(%q) refused %v, want %v", name, got, bad)
		}
	}
}
