package model

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Secret is a user-defined job secret, sealed at rest (issue 9): the
// controller holds Sealed and opens it only to hand the value to a job's
// replicas. The API never returns Sealed or the value.
type Secret struct {
	Project string `json:"project"`
	Name    string `json:"name"`
	// Sealed is the value, sealed by package secrets with the associated
	// data SecretAAD(project, name).
	Sealed string `json:"sealed"`
	// Version counts writes, from 1.
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// SecretInfo is what the API shows of a secret: never its value.
type SecretInfo struct {
	Project   string    `json:"project"`
	Name      string    `json:"name"`
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// Info drops the sealed value.
func (s Secret) Info() SecretInfo {
	return SecretInfo{Project: s.Project, Name: s.Name, Version: s.Version, UpdatedAt: s.UpdatedAt}
}

// SecretAAD binds a sealed value to its record, so it does not open when
// copied to another project or name.
func SecretAAD(project, name string) []byte { return []byte("secret/" + project + "/" + name) }

// secretNameRE: secrets become environment variables, so their names are
// shell-safe.
var secretNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// MaxSecretBytes bounds a secret's value.
const MaxSecretBytes = 64 << 10

// ValidateSecretName returns why name cannot name a secret, or "".
func ValidateSecretName(name string) string {
	switch {
	case !secretNameRE.MatchString(name):
		return fmt.Sprintf("%q must be a letter or _, then letters, digits or _ (at most 128): it becomes an environment variable", name)
	case strings.HasPrefix(name, "GPUFLEET_") || name == "CUDA_VISIBLE_DEVICES":
		return fmt.Sprintf("%q is set by gpufleet", name)
	}
	return ""
}

// SecretRef names a sealed secret from a document that must not hold the
// value itself (a budget's webhook URL or signing key): "project/NAME".
// The reference is not secret; the API shows it.
type SecretRef string

// Split returns the reference's project and name; ok is false when it is
// not "project/NAME".
func (r SecretRef) Split() (project, name string, ok bool) {
	project, name, ok = strings.Cut(string(r), "/")
	return project, name, ok && project != "" && name != ""
}

// Validate returns why r cannot name a secret, or "".
func (r SecretRef) Validate() string {
	project, name, ok := r.Split()
	switch {
	case !ok:
		return fmt.Sprintf("%q must be project/NAME: a secret written with `gpufleet secrets set PROJECT NAME`", string(r))
	case !ValidName(project):
		return fmt.Sprintf("%q: the project must be lower-case letters, digits and dashes (at most 63)", string(r))
	}
	return ValidateSecretName(name)
}
