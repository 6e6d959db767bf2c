package ckptsync

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Marker is the file a job writes when a checkpoint is complete.
const Marker = "LATEST"

// maxMarker bounds the marker's content kept in a manifest.
const maxMarker = 4096

// Manifest is one complete checkpoint of a job.
type Manifest struct {
	Version int    `json:"version"`
	JobID   string `json:"jobId"`
	// Attempt is the attempt that uploaded it, and its number.
	Attempt       string `json:"attempt,omitempty"`
	AttemptNumber int    `json:"attemptNumber,omitempty"`
	// Step is the training step the marker names (0 when it names none).
	Step int64 `json:"step"`
	// Time is the checkpoint's time: the marker's, else its modification
	// time.
	Time time.Time `json:"time"`
	// Marker is the content of LATEST.
	Marker string `json:"marker"`
	// Uploaded is when the upload completed.
	Uploaded time.Time `json:"uploaded"`
	Files    []File    `json:"files"`
	// Name, Release and Tags are set on a pushed artefact's manifest
	// (package artifacts), not on a checkpoint's: its name, its version
	// (sortable, unique) and tags; JobID is then the job it came from,
	// if any.
	Name    string   `json:"name,omitempty"`
	Release string   `json:"release,omitempty"`
	Tags    []string `json:"tags,omitempty"`
}

// File is one file of a checkpoint.
type File struct {
	// Path is slash-separated, relative to the checkpoint folder.
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Object is the content's opaque name (objstore.Sealer.Name).
	Object string `json:"object"`
	Mode   uint32 `json:"mode"`
}

// Bytes is the total size of the checkpoint's files.
func (m Manifest) Bytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

var stepRe = regexp.MustCompile(`(?i)(?:step|iter(?:ation)?|work|epoch)?\s*[=:]?\s*(\d+)`)

// parseMarker reads the step and time a LATEST marker names. Accepted: a
// JSON object with "step" (number) and "time" (RFC 3339), or text whose
// first number is the step ("step=1200", "1200") and whose first RFC 3339
// word is the time. mtime is the time when the marker names none.
func parseMarker(content []byte, mtime time.Time) (step int64, at time.Time) {
	at = mtime
	var j struct {
		Step *int64  `json:"step"`
		Time *string `json:"time"`
	}
	if json.Unmarshal(content, &j) == nil && j.Step != nil {
		step = *j.Step
		if j.Time != nil {
			if t, err := time.Parse(time.RFC3339Nano, *j.Time); err == nil {
				at = t
			}
		}
		return step, at
	}
	text := string(content)
	for _, w := range strings.Fields(text) {
		if i := strings.IndexByte(w, '='); i >= 0 {
			w = w[i+1:]
		}
		if t, err := time.Parse(time.RFC3339Nano, w); err == nil {
			at = t
			text = strings.Replace(text, w, "", 1)
			break
		}
	}
	if m := stepRe.FindStringSubmatch(text); m != nil {
		step, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return step, at
}
