package model

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Artifact kinds (docs/artifacts.md).
const (
	// ArtifactCheckpoint is a job's checkpoint, uploaded by its node.
	ArtifactCheckpoint = "checkpoint"
	// ArtifactModel is a folder pushed under a name (model files,
	// evaluation results), versioned.
	ArtifactModel = "model"
)

// ErrCorrupt: stored bytes failed verification (seal, size or SHA-256).
var ErrCorrupt = errors.New("corrupt")

// ReleaseTag is the tag retention keeps by default.
const ReleaseTag = "release"

// Artifact is one version of a project's checkpoint or pushed artefact as
// the API lists it; Files is filled only when one artefact is asked for.
type Artifact struct {
	Project string `json:"project"`
	Kind    string `json:"kind"`
	// Job is the checkpoint's job, or the job a pushed artefact came
	// from (optional).
	Job string `json:"job,omitempty"`
	// Name and Version identify a pushed artefact (Version is sortable:
	// later pushes have greater versions).
	Name    string `json:"name,omitempty"`
	Version string `json:"version"`
	// Step is the checkpoint's training step.
	Step int64 `json:"step,omitempty"`
	// Latest: the job's latest complete checkpoint (what a resume
	// restores), or a pushed artefact's newest version.
	Latest   bool           `json:"latest,omitempty"`
	Tags     []string       `json:"tags,omitempty"`
	Attempt  int            `json:"attempt,omitempty"`
	Uploaded time.Time      `json:"uploaded"`
	Bytes    int64          `json:"bytes"`
	Count    int            `json:"files"`
	Files    []ArtifactFile `json:"fileList,omitempty"`
	// Storage is where it is kept ("s3://bucket/prefix").
	Storage string `json:"storage"`
}

// ArtifactFile is one file of an artefact.
type ArtifactFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Mode   uint32 `json:"mode,omitempty"`
}

// ArtifactList is the body of GET /v1/artifacts.
type ArtifactList struct {
	Items []Artifact `json:"items"`
}

// ArtifactFilter selects artefacts to list.
type ArtifactFilter struct {
	Job  string
	Name string
	Kind string
}

// ArtifactPush is the body of a push: the files of a folder, each named
// by its SHA-256 (whose content the client has sent or the store holds).
type ArtifactPush struct {
	Tags []string `json:"tags,omitempty"`
	// Job names the job the files came from (optional, shown in lists).
	Job   string         `json:"job,omitempty"`
	Files []ArtifactFile `json:"files"`
}

// ArtifactPolicy is a project's retention of artefacts (ProjectSpec
// .Artifacts), applied by the leader (docs/artifacts.md).
type ArtifactPolicy struct {
	// Storage is where the project's pushed artefacts are kept; unset
	// means the fleet's checkpoint storage, when its pools use exactly
	// one.
	Storage *Storage `json:"storage,omitempty"`
	// KeepCheckpoints keeps the last N checkpoints of each job (and always
	// the latest); 0 keeps all.
	KeepCheckpoints int `json:"keepCheckpoints,omitempty"`
	// KeepVersions keeps the last N versions of each pushed artefact; 0
	// keeps all.
	KeepVersions int `json:"keepVersions,omitempty"`
	// KeepTags: versions with any of these tags are never removed by
	// retention; unset means [release].
	KeepTags []string `json:"keepTags,omitempty"`
}

// Kept reports whether tags hold one retention keeps.
func (p *ArtifactPolicy) Kept(tags []string) bool {
	keep := []string{ReleaseTag}
	if p != nil && p.KeepTags != nil {
		keep = p.KeepTags
	}
	for _, t := range tags {
		for _, k := range keep {
			if t == k {
				return true
			}
		}
	}
	return false
}

// Validate reports every problem in p with paths under prefix.
func (p *ArtifactPolicy) Validate(prefix string) FieldErrors {
	var fe FieldErrors
	if p.Storage != nil {
		fe = append(fe, p.Storage.Validate(prefix+".storage")...)
	}
	if p.KeepCheckpoints < 0 || p.KeepCheckpoints > 100000 {
		fe.Add(prefix+".keepCheckpoints", "must be between 0 (keep all) and 100000")
	}
	if p.KeepVersions < 0 || p.KeepVersions > 100000 {
		fe.Add(prefix+".keepVersions", "must be between 0 (keep all) and 100000")
	}
	for i, t := range p.KeepTags {
		if msg := CheckArtifactTag(t); msg != "" {
			fe.Add(fmt.Sprintf("%s.keepTags[%d]", prefix, i), msg)
		}
	}
	return fe
}

// CheckArtifactName returns what is wrong with a pushed artefact's name,
// or "". Names look like object names and never like job ids ("j-…"), so
// `gpufleet artifacts get X` can tell them apart.
func CheckArtifactName(n string) string {
	if !ValidName(n) {
		return fmt.Sprintf("%q must be lower-case letters, digits and dashes (at most 63), starting and ending with a letter or digit", n)
	}
	if strings.HasPrefix(n, "j-") {
		return fmt.Sprintf("%q must not start with j- (job ids do)", n)
	}
	return ""
}

// CheckArtifactTag returns what is wrong with a tag, or "".
func CheckArtifactTag(t string) string {
	if !ValidName(t) {
		return fmt.Sprintf("tag %q must be lower-case letters, digits and dashes (at most 63)", t)
	}
	return ""
}

// ArtifactRef names one artefact: a job's checkpoint (Job set) or a pushed
// artefact's version (Name set).
type ArtifactRef struct {
	Job  string
	Name string
	// Version: for a checkpoint "" or "latest" (the job's latest) or a
	// step number; for a pushed artefact "" or "latest" (its newest
	// version), a version, or "@TAG" (the newest version with that tag).
	Version string
}

// String describes r for errors.
func (r ArtifactRef) String() string {
	v := r.Version
	if v == "" {
		v = "latest"
	}
	if r.Job != "" {
		if v == "latest" {
			return fmt.Sprintf("the latest checkpoint of job %s", r.Job)
		}
		return fmt.Sprintf("the checkpoint of job %s at step %s", r.Job, v)
	}
	return fmt.Sprintf("artefact %s version %s", r.Name, v)
}
