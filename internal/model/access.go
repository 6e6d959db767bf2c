package model

import (
	"fmt"
	"time"
)

// Role is what a user may do in a project (DESIGN.md §6). Roles are ordered:
// each holds every permission of the roles below it.
type Role string

// Roles, least first. A user holds nothing until granted a role; admin is
// global and is granted on AllProjects only.
const (
	RoleViewer       Role = "viewer"
	RoleMember       Role = "member"
	RoleProjectAdmin Role = "project-admin"
	RoleAdmin        Role = "admin"
)

// AllProjects is the project of a global grant (the admin role).
const AllProjects = "*"

// Roles lists every role, least first.
var Roles = []Role{RoleViewer, RoleMember, RoleProjectAdmin, RoleAdmin}

// Rank orders roles: 0 for none or an unknown role, then viewer 1 … admin 4.
func (r Role) Rank() int {
	for i, x := range Roles {
		if x == r {
			return i + 1
		}
	}
	return 0
}

// Grant gives a user (a user token's subject) a role in a project.
type Grant struct {
	User      string    `json:"user"`
	Project   string    `json:"project"`
	Role      Role      `json:"role"`
	CreatedAt time.Time `json:"createdAt,omitzero"`
}

// Validate reports every problem in g, with paths under prefix ("" for the
// top level).
func (g *Grant) Validate(prefix string) FieldErrors {
	var fe FieldErrors
	p := func(f string) string {
		if prefix == "" {
			return f
		}
		return prefix + "." + f
	}
	if msg := UserProblem(g.User); msg != "" {
		fe.Add(p("user"), msg)
	}
	switch {
	case g.Role.Rank() == 0:
		fe.Add(p("role"), fmt.Sprintf("%q is not viewer, member, project-admin or admin", g.Role))
	case g.Role == RoleAdmin && g.Project != AllProjects:
		fe.Add(p("project"), `admin is global: grant it on project "*"`)
	case g.Role != RoleAdmin && !ValidName(g.Project):
		fe.Add(p("project"), "must be a project name: lower-case letters, digits and dashes (at most 63)")
	}
	return fe
}

// AuditEntry is one record of the append-only audit log: a mutation or a
// refused request. It never holds a secret value or a token secret. Hash
// chains it to the entry before (see package audit).
type AuditEntry struct {
	Seq       uint64    `json:"seq"`
	Time      time.Time `json:"time"`
	Actor     string    `json:"actor,omitempty"`
	TokenID   string    `json:"tokenId,omitempty"`
	Project   string    `json:"project,omitempty"`
	Action    string    `json:"action"`
	Object    string    `json:"object,omitempty"`
	RequestID string    `json:"requestId,omitempty"`
	// Result is the HTTP status the request was answered with.
	Result   int    `json:"result"`
	PrevHash string `json:"prevHash"`
	Hash     string `json:"hash,omitempty"`
}
