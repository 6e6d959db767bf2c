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
