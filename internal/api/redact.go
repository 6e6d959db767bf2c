package api

import (
	"encoding/json"
	"net/http"
	"regexp"
)

// jobIDRE finds job ids in free text, and so the ids built on them
// (attempts, replicas, array tasks): j- and ten lower-case base32 characters.
var jobIDRE = regexp.MustCompile(`\bj-[a-z2-7]{10}\b`)

// otherJob is what a caller who may not read a job sees in its place.
const otherJob = "another project's job"

// redactJobs replaces, in v's strings, every job id the caller may not
// read (a job of a project where they are not at least viewer) with
// otherJob: an explanation names the jobs a reservation or a preemption
// is for, and a tenant must learn nothing of another's. Admins see all.
// The answer is v's JSON, for writeJSON.
func (s *Server) redactJobs(r *http.Request, v any) any {
	visible := s.visibleProjects(r, MinRole[PermJobsRead])
	if visible == nil {
		return v
	}
	data, err := json.Marshal(v)
	if err != nil {
		return v
	}
	readable := map[string]bool{}
	out := jobIDRE.ReplaceAllStringFunc(string(data), func(id string) string {
		ok, seen := readable[id]
		if !seen {
			ok = s.mayReadJob(visible, id)
			readable[id] = ok
		}
		if ok {
			return id
		}
		return otherJob
	})
	return json.RawMessage(out) // the bytes as they are: numbers untouched
}

// mayReadJob: id is a job, or an array whose first task is, in a visible
// project.
func (s *Server) mayReadJob(visible map[string]bool, id string) bool {
	j, err := s.cfg.Controller.Job(id)
	if err != nil {
		j, err = s.cfg.Controller.Job(id + "-0")
	}
	return err == nil && visible[j.Project]
}
