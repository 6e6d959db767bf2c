package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// IdempotencyHeader names the header that makes a submission retry-safe.
const IdempotencyHeader = "Idempotency-Key"

func (s *Server) version(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, VersionInfo{Version: s.cfg.Version, GoVersion: runtime.Version(), APIVersion: "v1"})
}

// readBody reads a limited body; it answers 413 itself when the body is too big.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := readAll(r.Body, r.ContentLength)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeProblem(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes", tooBig.Limit), nil)
		return nil, false
	case err != nil:
		writeProblem(w, r, http.StatusBadRequest, "reading request body: "+err.Error(), nil)
		return nil, false
	}
	return body, true
}

// readAll is io.ReadAll with its first buffer sized for the length the
// client declared (one byte over, so that the read that meets the end needs
// no more room): one allocation for a typical body instead of several. The
// declared length is only a hint, trusted up to presizeLimit.
func readAll(r io.Reader, declared int64) ([]byte, error) {
	if declared <= 0 || declared >= presizeLimit {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, declared+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // longer than declared: grow as io.ReadAll does
		}
	}
}

// presizeLimit bounds the buffer readAll allocates on a client's word.
const presizeLimit = 64 << 10

func (s *Server) submitJob(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	key := r.Header.Get(IdempotencyHeader)
	if len(key) > 255 || strings.ContainsFunc(key, func(c rune) bool { return c < 0x20 || c > 0x7e }) {
		writeProblem(w, r, http.StatusBadRequest, "", model.FieldErrors{{Path: "header." + IdempotencyHeader, Message: "must be at most 255 printable ASCII characters"}})
		return
	}
	format := manifest.JSON
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); strings.Contains(mt, "yaml") {
		format = manifest.YAML
	}
	job, problems := manifest.ParseJob(body, format, s.cfg.Catalog.KnownGPU)
	if len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "the job spec is invalid; fix the fields below", problems)
		return
	}
	for i, m := range job.Spec.Resources.GPU.Models {
		if c, ok := s.cfg.Catalog.CanonicalGPU(m); ok {
			job.Spec.Resources.GPU.Models[i] = c
		}
	}
	project := job.Metadata.Project
	if project == "" {
		project = model.DefaultProject
	}
	if !s.allowProject(w, r, project) {
		return
	}
	admin := s.cfg.Roles.RoleIn(caller(r), project) == model.RoleAdmin
	if fe := job.Spec.HostPaths("spec"); len(fe) > 0 && !admin {
		writeProblem(w, r, http.StatusBadRequest, "the job asks for host access, which only admins may grant", fe)
		return
	}
	sum := sha256.Sum256(body)
	a := accessOf(r)
	entry := auditEntry(a.route, r, a, http.StatusCreated)
	created, isNew, err := s.cfg.Controller.Submit(r.Context(), model.Submission{
		Name: job.Metadata.Name, Project: project, User: caller(r).Subject, Tags: job.Metadata.Tags,
		Spec: job.Spec, IdempotencyKey: key, BodyHash: sum[:], Audit: &entry, Trusted: admin,
	})
	a.recorded = err == nil && isNew
	var refused model.FieldErrors
	if errors.As(err, &refused) {
		writeProblem(w, r, http.StatusBadRequest, "project "+project+" refuses the job spec; fix the fields below", refused)
		return
	}
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	v := JobView{Job: created}
	if created.ArrayID != "" {
		if v, err = s.arrayView(created.ArrayID); err != nil {
			writeProblem(w, r, statusOf(err), err.Error(), nil)
			return
		}
	}
	w.Header().Set("Location", "/v1/jobs/"+v.ID)
	status := http.StatusCreated
	if !isNew {
		status = http.StatusOK
	}
	writeJSON(w, status, v)
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var f model.JobFilter
	var problems model.FieldErrors
	if v := q.Get("state"); v != "" {
		for _, st := range strings.Split(v, ",") {
			st = strings.TrimSpace(st)
			if !validJobState(st) {
				problems.Add("query.state", fmt.Sprintf("unknown state %q", st))
				continue
			}
			f.States = append(f.States, model.JobState(st))
		}
	}
	f.Project = q.Get("project")
	if f.Project != "" && !model.ValidName(f.Project) {
		problems.Add("query.project", "must be a project name: lower-case letters, digits and dashes (at most 63)")
	}
	f.Array = q.Get("array")
	f.User, f.Queue = q.Get("user"), q.Get("queue")
	if f.Queue != "" && !model.ValidName(f.Queue) {
		problems.Add("query.queue", "must be a queue name: lower-case letters, digits and dashes (at most 63)")
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			problems.Add("query.limit", "must be a positive integer")
		}
		f.Limit = n
	}
	page := readListPage(q, &problems)
	if len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "", problems)
		return
	}
	if f.Project == "" {
		f.Projects = s.visibleProjects(r, MinRole[PermJobsRead])
	}
	if page.offset > 0 || page.search != "" || page.summary {
		limit := f.Limit
		if limit == 0 {
			limit = 1000
		}
		f.Limit = math.MaxInt // every match, for the total; paged here
		writeJSON(w, http.StatusOK, s.redactJobs(r, s.paged(s.cfg.Controller.Jobs(f), page, limit)))
		return
	}
	writeJSON(w, http.StatusOK, s.redactJobs(r, JobList{Jobs: nonNil(s.cfg.Controller.Jobs(f))}))
}

func validJobState(s string) bool {
	for _, st := range model.JobStates {
		if string(st) == s {
			return true
		}
	}
	return false
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// jobView shows a job, or an array job when id names one.
func (s *Server) jobView(id string) (JobView, error) {
	j, err := s.cfg.Controller.Job(id)
	if errors.Is(err, model.ErrNotFound) {
		if v, aerr := s.arrayView(id); aerr == nil {
			return v, nil
		}
	}
	if err != nil {
		return JobView{}, err
	}
	atts, err := s.cfg.Controller.Attempts(id)
	if err != nil {
		return JobView{}, err
	}
	v := JobView{Job: j, AttemptDetails: atts}
	if jc, ok := s.cfg.Controller.JobCost(id); ok {
		v.Cost = jobCostView(jc)
	}
	if e, ok := s.cfg.Controller.Efficiency(id); ok {
		v.Efficiency = &e
	}
	if j.State == model.JobQueued {
		if verdict, ok := s.cfg.Controller.Verdict(id); ok {
			v.Pending = &verdict
		}
	}
	return v, nil
}

// arrayView summarises an array job from its tasks.
func (s *Server) arrayView(id string) (JobView, error) {
	tasks, err := s.cfg.Controller.Array(id)
	if err != nil {
		return JobView{}, err
	}
	first := tasks[0]
	sum := &model.Job{ID: id, Name: first.Name, Project: first.Project, User: first.User, Tags: first.Tags, Spec: first.Spec,
		State: ArrayState(tasks), SubmittedAt: first.SubmittedAt, EnqueuedAt: first.SubmittedAt, ArrayID: id, Seq: first.Seq}
	av := &ArrayView{Size: len(tasks), States: map[model.JobState]int{}, Tasks: tasks}
	for _, t := range tasks {
		av.States[t.State]++
		sum.Attempts += t.Attempts
	}
	return JobView{Job: sum, Array: av}, nil
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	v, err := s.jobView(r.PathValue("id"))
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, s.redactJobs(r, v))
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.cfg.Controller.Cancel(r.Context(), id); err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	v, err := s.jobView(id)
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusAccepted, v)
}

// reportCheckpoint records that the job completed a checkpoint; a job's
// own token may call it (DESIGN.md §3.5).
func (s *Server) reportCheckpoint(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		var rep CheckpointReport
		if problems := manifest.DecodeJSON(body, &rep); len(problems) > 0 {
			writeProblem(w, r, http.StatusBadRequest, "the checkpoint report is invalid", problems)
			return
		}
	}
	id := r.PathValue("id")
	if _, err := s.cfg.Controller.Checkpoint(r.Context(), id); err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	v, err := s.jobView(id)
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// listNodes shows every node, and on each GPU the attempt holding it only
// where the caller may read that attempt's job (a role that reads jobs in
// its project, or a global admin); another tenant's attempt is shown "in
// use", without job or attempt ids, project or user. The dashboard reads
// the same route, so it shows the same.
func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	nodes := nonNil(s.cfg.Controller.Nodes())
	if projects := s.visibleProjects(r, MinRole[PermJobsRead]); projects != nil {
		visible := func(p string) bool { return projects[p] }
		for i := range nodes {
			nodes[i] = nodes[i].Redacted(visible)
		}
	}
	writeJSON(w, http.StatusOK, NodeList{Nodes: nodes})
}

// ParseOfferQuery turns query parameters into a catalog query, naming every
// bad parameter.
func ParseOfferQuery(q map[string][]string, canonical func(string) (string, bool)) (catalog.Query, model.FieldErrors) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	list := func(k string) []string {
		var out []string
		for _, v := range strings.Split(get(k), ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
		return out
	}
	var cq catalog.Query
	var fe model.FieldErrors
	for _, g := range list("gpu") {
		c, ok := canonical(g)
		if !ok {
			fe.Add("query.gpu", fmt.Sprintf("unknown GPU model %q", g))
			continue
		}
		cq.GPUs = append(cq.GPUs, c)
	}
	if v := get("minGpuMemory"); v != "" {
		b, err := model.ParseBytes(v)
		if err != nil {
			fe.Add("query.minGpuMemory", err.Error())
		}
		cq.MinGPUMemory = b
	}
	if v := get("gpus"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fe.Add("query.gpus", "must be a positive integer")
		}
		cq.GPUCount = n
	}
	cq.Providers = list("provider")
	cq.Regions = list("region")
	for _, c := range list("capacity") {
		cq.CapacityTypes = append(cq.CapacityTypes, model.CapacityType(c))
	}
	if v := get("maxPrice"); v != "" {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil || p < 0 {
			fe.Add("query.maxPrice", "must be a non-negative number")
		}
		cq.MaxPricePerHour = p
	}
	cq.Sort = get("sort")
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fe.Add("query.limit", "must be a positive integer")
		}
		cq.Limit = n
	}
	if v := get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fe.Add("query.offset", "must be a non-negative integer")
		}
		cq.Offset = n
	}
	for _, e := range cq.Validate() {
		field, index, _ := strings.Cut(e.Path, "[")
		if p, ok := offerParams[field]; ok {
			field = p
		}
		if index != "" {
			field += "[" + index
		}
		fe = append(fe, model.FieldError{Path: "query." + field, Message: e.Message})
	}
	return cq, fe
}

// offerParams names catalog.Query fields by the query parameters that set
// them, so errors point at what the caller sent.
var offerParams = map[string]string{
	"gpus": "gpu", "minGPUMemory": "minGpuMemory", "gpuCount": "gpus", "minGPUCount": "gpus",
	"providers": "provider", "regions": "region", "capacityTypes": "capacity", "maxPricePerHour": "maxPrice",
}

// UnavailableList is the answer of GET /v1/offers/unavailable.
type UnavailableList struct {
	Unavailable []model.Unavailable `json:"unavailable"`
}

func (s *Server) listUnavailable(w http.ResponseWriter, _ *http.Request) {
	us := s.cfg.Controller.Unavailable()
	if us == nil {
		us = []model.Unavailable{}
	}
	writeJSON(w, http.StatusOK, UnavailableList{Unavailable: us})
}

// owned is Config.Owned's offers, or none.
func (s *Server) owned(ctx context.Context) []model.Offer {
	if s.cfg.Owned == nil {
		return nil
	}
	return s.cfg.Owned(ctx)
}

func (s *Server) listOffers(w http.ResponseWriter, r *http.Request) {
	q, problems := ParseOfferQuery(r.URL.Query(), s.cfg.Catalog.CanonicalGPU)
	if len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "", problems)
		return
	}
	page, total := s.cfg.Catalog.Page(q, s.owned(r.Context()))
	writeJSON(w, http.StatusOK, OfferList{Offers: nonNil(page), Total: total})
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var req TokenCreate
	if problems := manifest.DecodeJSON(body, &req); len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "", problems)
		return
	}
	var fe model.FieldErrors
	if req.Kind != model.TokenUser && req.Kind != model.TokenAgent && req.Kind != model.TokenProxy {
		fe.Add("kind", "must be user, agent or proxy")
	}
	switch {
	case req.Subject == "":
		fe.Add("subject", "must name the user, node or proxy")
	case (req.Kind == model.TokenAgent || req.Kind == model.TokenProxy) && !model.ValidName(req.Subject):
		fe.Add("subject", "an agent token's subject is the id its node registers as: 1 to 63 lower-case letters, digits and dashes (e.g. gpu-box-1)")
	case req.Kind == model.TokenUser:
		if msg := model.UserProblem(req.Subject); msg != "" {
			fe.Add("subject", msg)
		}
	}
	if req.Name != "" {
		if msg := model.TextProblem(req.Name, maxTokenNameLen); msg != "" {
			fe.Add("name", msg)
		}
	}
	if req.TTL.D() <= 0 || req.TTL.D() > maxTokenTTL {
		fe.Add("ttl", "must be between 1s and 366d: every token expires")
	}
	if req.Admin && req.Kind != model.TokenUser {
		fe.Add("admin", "only user tokens can be admin")
	}
	if len(fe) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "", fe)
		return
	}
	tok, secret, err := s.cfg.Identity.CreateToken(r.Context(), model.TokenRequest{
		Kind: req.Kind, Subject: req.Subject, Name: req.Name, Admin: req.Admin, TTL: req.TTL.D(),
	})
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusCreated, TokenCreated{Token: tok, Secret: secret})
}

func (s *Server) listTokens(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, TokenList{Tokens: nonNil(s.cfg.Identity.Tokens())})
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.Identity.RevokeToken(r.Context(), r.PathValue("id")); err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// jobLogs writes one replica's log; with follow it streams until the attempt
// has ended and its log is complete.
func (s *Server) jobLogs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	q := r.URL.Query()
	var fe model.FieldErrors
	intParam := func(name string, def, min int) int {
		v := q.Get(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < min {
			fe.Add("query."+name, fmt.Sprintf("must be an integer ≥ %d", min))
		}
		return n
	}
	attempt := intParam("attempt", 0, 1)
	rank := intParam("rank", 0, 0)
	offset := int64(intParam("offset", 0, 0))
	follow := q.Get("follow") == "true" || q.Get("follow") == "1"
	if len(fe) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "", fe)
		return
	}
	job, err := s.cfg.Controller.Job(id)
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	if rank >= job.Spec.Replicas {
		writeProblem(w, r, http.StatusBadRequest, "", model.FieldErrors{{Path: "query.rank", Message: fmt.Sprintf("job has %d replicas", job.Spec.Replicas)}})
		return
	}
	ctx := r.Context()
	// Wait for the attempt to exist when following a job that has not started.
	for attempt == 0 || job.Attempts < attempt {
		if attempt == 0 && job.Attempts > 0 {
			attempt = job.Attempts
			break
		}
		if !follow || job.State.Terminal() {
			if attempt > job.Attempts {
				writeProblem(w, r, http.StatusNotFound, fmt.Sprintf("job %s has %d attempts", id, job.Attempts), nil)
			} else {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(http.StatusOK)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
		if job, err = s.cfg.Controller.Job(id); err != nil {
			writeProblem(w, r, statusOf(err), err.Error(), nil)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Gpufleet-Attempt", strconv.Itoa(attempt))
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	key := logstore.Key{JobID: id, Attempt: attempt, Rank: rank}
	for {
		changed := s.cfg.Logs.Changed(key)
		offset, err = s.cfg.Logs.ReadAt(key, offset, w)
		if err != nil {
			s.cfg.Log.Warn("reading log", "job_id", id, "attempt", attempt, "err", err)
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		if !follow || s.logDone(key, offset) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// logDone reports whether a followed log can end: it is complete, or its
// replica ended without one (lost) and everything stored has been sent.
func (s *Server) logDone(key logstore.Key, offset int64) bool {
	size, complete, err := s.cfg.Logs.Size(key)
	if err != nil || offset < size {
		return err != nil
	}
	if complete {
		return true
	}
	atts, err := s.cfg.Controller.Attempts(key.JobID)
	if err != nil || key.Attempt > len(atts) {
		return true
	}
	a := atts[key.Attempt-1]
	if key.Rank >= len(a.Replicas) {
		return true
	}
	r := a.Replicas[key.Rank]
	switch {
	case r.State == model.AttemptLost:
		return true
	case !a.State.Terminal():
		return false
	case r.ExitCode == nil:
		return true // never started: there is no output to wait for
	}
	// Agents ship the end of a log before reporting the exit, so this only
	// ends a follow whose agent vanished mid-shipping.
	return a.EndedAt != nil && time.Since(*a.EndedAt) > logGrace
}

// logGrace is how long a follower waits for the rest of an ended replica's log.
const logGrace = 30 * time.Second

func (s *Server) listAlerts(w http.ResponseWriter, r *http.Request) {
	items := s.cfg.Controller.Alerts()
	if visible := s.visibleProjects(r, MinRole[PermJobsRead]); visible != nil {
		items = slices.DeleteFunc(items, func(a model.Alert) bool { return !s.jobVisible(a.Job, visible) })
	}
	writeJSON(w, http.StatusOK, AlertList{Items: items})
}
