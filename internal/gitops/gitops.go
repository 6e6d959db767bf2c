package gitops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	neturl "net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/fleet"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Author is the revision author of GitOps applies; the commit's author is
// in Revision.CommitAuthor.
const Author = "gitops"

// Target is the fleet GitOps applies to (the controller).
type Target interface {
	// PlanBase is what a plan of desired is diffed against.
	PlanBase(desired *manifest.Set) (*model.Revision, *manifest.Set)
	ApplyFleet(ctx context.Context, desired *manifest.Set, opts model.ApplyOptions) (model.ApplyResult, error)
	// Revisions lists every revision, oldest first.
	Revisions() []model.Revision
}

// Config says what to follow and how.
type Config struct {
	// URL is the repository (https://, ssh:// or file://, or a local
	// path); Branch defaults to main, Path (a directory in the
	// repository, not recursed) to its root.
	URL, Branch, Path string
	// Interval is the time between polls (1m when 0).
	Interval time.Duration
	// AutoApply applies each new commit; otherwise it is planned only.
	AutoApply bool
	// CredentialsRef names the sealed secret ("project/NAME") holding
	// the HTTPS credentials: "USER:TOKEN", or a token alone (sent as
	// user "git"). Empty: none.
	CredentialsRef model.SecretRef
	// OpenSecret returns a sealed secret's value; required with
	// CredentialsRef.
	OpenSecret func(project, name string) (string, error)
	// KnownGPU validates GPU models in the documents (nil: any).
	KnownGPU func(string) bool
	// CheckPool checks NodePools against their drivers (the provider
	// registry's CheckPool; nil: not checked).
	CheckPool func(spec *model.NodePoolSpec, prefix string, knownGPU func(string) bool) model.FieldErrors
	// Pricing prices the plans.
	Pricing fleet.Pricing
	Target  Target
	Clock   clock.Clock
	Log     *slog.Logger
}

// Commit is a git commit as GitOps reports it.
type Commit struct {
	SHA     string    `json:"sha"`
	Author  string    `json:"author"` // "Name <email>"
	Subject string    `json:"subject"`
	When    time.Time `json:"when"`
}

// Status is what the last poll found.
type Status struct {
	// URL is the repository with any user info removed.
	URL       string `json:"url"`
	Branch    string `json:"branch"`
	Path      string `json:"path"`
	AutoApply bool   `json:"autoApply"`
	// CheckedAt is when the last poll ended; Error what failed in it.
	CheckedAt time.Time `json:"checkedAt,omitzero"`
	Error     string    `json:"error,omitempty"`
	// Head is the branch's head commit; nil before the first fetch.
	Head *Commit `json:"head,omitempty"`
	// Applied is the revision that applied Head, 0 when none did.
	Applied int `json:"applied,omitempty"`
	// InSync reports whether the fleet declares exactly Head's
	// documents. When not, Pending is the plan of Head against the fleet
	// (the drift), against BaseRevision.
	InSync       bool          `json:"inSync"`
	BaseRevision int           `json:"baseRevision"`
	Pending      *fleet.Result `json:"pending,omitempty"`
}

// Syncer follows one repository. Its methods are safe for concurrent use.
type Syncer struct {
	cfg Config
	// pollMu makes polls one at a time; repo is only used under it.
	pollMu sync.Mutex
	repo   *git.Repository
	// mu guards status.
	mu     sync.Mutex
	status Status
}

// New returns a Syncer for cfg; it does not fetch until Poll or Run.
func New(cfg Config) (*Syncer, error) {
	if cfg.URL == "" {
		return nil, errors.New("gitops: a repository URL is required")
	}
	if cfg.Target == nil {
		return nil, errors.New("gitops: a target is required")
	}
	if cfg.Branch == "" {
		cfg.Branch = "main"
	}
	cfg.Path = strings.Trim(path.Clean("/"+cfg.Path), "/")
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	if cfg.CredentialsRef != "" {
		if msg := cfg.CredentialsRef.Validate(); msg != "" {
			return nil, fmt.Errorf("gitops credentials %q: %s", cfg.CredentialsRef, msg)
		}
		if cfg.OpenSecret == nil {
			return nil, errors.New("gitops: credentials need a secret opener")
		}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Syncer{cfg: cfg, status: Status{URL: redactURL(cfg.URL), Branch: cfg.Branch, Path: cfg.Path, AutoApply: cfg.AutoApply}}, nil
}

// Status returns what the last poll found.
func (s *Syncer) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	return st
}

// Run polls every Interval until ctx ends.
func (s *Syncer) Run(ctx context.Context) error {
	tick := s.cfg.Clock.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		if err := s.Poll(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("gitops poll failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		}
	}
}

// Poll fetches the branch, plans its head and applies it when AutoApply
// is set and no revision applied it yet. Its error is also in Status.
func (s *Syncer) Poll(ctx context.Context) error {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	st, err := s.poll(ctx)
	st.URL, st.Branch, st.Path, st.AutoApply = redactURL(s.cfg.URL), s.cfg.Branch, s.cfg.Path, s.cfg.AutoApply
	st.CheckedAt = s.cfg.Clock.Now()
	if err != nil {
		st.Error = err.Error()
	}
	s.mu.Lock()
	s.status = st
	s.mu.Unlock()
	return err
}

func (s *Syncer) poll(ctx context.Context) (Status, error) {
	var st Status
	head, sources, err := s.fetch(ctx)
	if err != nil {
		s.mu.Lock()
		st = s.status // keep what was last known
		s.mu.Unlock()
		return st, err
	}
	st.Head = &head
	set, fe := manifest.Parse(sources, manifest.Checks{KnownGPU: s.cfg.KnownGPU, Pool: s.cfg.CheckPool})
	if len(fe) > 0 {
		return st, fmt.Errorf("commit %s: %w", short(head.SHA), fe.Err())
	}
	for _, r := range s.cfg.Target.Revisions() {
		if r.Commit == head.SHA {
			st.Applied = r.Number
		}
	}
	if st.Applied == 0 && s.cfg.AutoApply {
		res, err := s.cfg.Target.ApplyFleet(ctx, set, model.ApplyOptions{Author: Author, Message: head.Subject,
			Commit: head.SHA, CommitAuthor: head.Author})
		if err != nil {
			s.plan(&st, set)
			return st, fmt.Errorf("applying commit %s: %w", short(head.SHA), err)
		}
		if res.Changed {
			st.Applied = res.Revision.Number
			s.cfg.Log.Info("gitops applied", "commit", head.SHA, "author", head.Author, "revision", res.Revision.Number)
		}
	}
	s.plan(&st, set)
	return st, nil
}

// plan sets st's drift: whether the fleet declares set, and if not the
// plan that would make it.
func (s *Syncer) plan(st *Status, set *manifest.Set) {
	cur, base := s.cfg.Target.PlanBase(set)
	if cur != nil {
		st.BaseRevision = cur.Number
	}
	res := fleet.Plan(base, set, s.cfg.Pricing)
	st.InSync = len(res.Changes) == 0
	if !st.InSync {
		st.Pending = &res
	}
}

// fetch brings the branch up to date and returns its head and the
// documents under Path.
func (s *Syncer) fetch(ctx context.Context) (Commit, []manifest.Source, error) {
	auth, err := s.auth()
	if err != nil {
		return Commit{}, nil, err
	}
	remoteRef := plumbing.NewRemoteReferenceName("origin", s.cfg.Branch)
	if s.repo == nil {
		repo, err := git.Init(memory.NewStorage(), nil)
		if err != nil {
			return Commit{}, nil, fmt.Errorf("gitops: %w", err)
		}
		if _, err := repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{s.cfg.URL}}); err != nil {
			return Commit{}, nil, fmt.Errorf("gitops: %w", err)
		}
		s.repo = repo
	}
	spec := config.RefSpec(fmt.Sprintf("+%s:%s", plumbing.NewBranchReferenceName(s.cfg.Branch), remoteRef))
	err = s.repo.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", RefSpecs: []config.RefSpec{spec}, Auth: auth, Force: true})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return Commit{}, nil, fmt.Errorf("fetching %s of %s: %w", s.cfg.Branch, redactURL(s.cfg.URL), scrub(err, s.cfg.URL))
	}
	ref, err := s.repo.Reference(remoteRef, true)
	if err != nil {
		return Commit{}, nil, fmt.Errorf("branch %s of %s: %w", s.cfg.Branch, redactURL(s.cfg.URL), err)
	}
	c, err := s.repo.CommitObject(ref.Hash())
	if err != nil {
		return Commit{}, nil, fmt.Errorf("commit %s: %w", ref.Hash(), err)
	}
	head := Commit{SHA: c.Hash.String(), Author: fmt.Sprintf("%s <%s>", c.Author.Name, c.Author.Email),
		Subject: strings.TrimSpace(strings.SplitN(c.Message, "\n", 2)[0]), When: c.Author.When.UTC()}
	sources, err := documents(c, s.cfg.Path)
	if err != nil {
		return head, nil, fmt.Errorf("commit %s: %w", short(head.SHA), err)
	}
	return head, sources, nil
}

// documents reads the *.yaml, *.yml and *.json files directly in dir of
// c's tree, in name order, as ParseDocuments reads a directory.
func documents(c *object.Commit, dir string) ([]manifest.Source, error) {
	tree, err := c.Tree()
	if err != nil {
		return nil, err
	}
	if dir != "" {
		if tree, err = tree.Tree(dir); err != nil {
			return nil, fmt.Errorf("no directory %s: %w", dir, err)
		}
	}
	var sources []manifest.Source
	for _, e := range tree.Entries {
		if !e.Mode.IsFile() {
			continue
		}
		var format manifest.Format
		switch strings.ToLower(path.Ext(e.Name)) {
		case ".yaml", ".yml":
			format = manifest.YAML
		case ".json":
			format = manifest.JSON
		default:
			continue
		}
		f, err := tree.TreeEntryFile(&e)
		if err != nil {
			return nil, err
		}
		r, err := f.Reader()
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(io.LimitReader(r, 8<<20))
		r.Close()
		if err != nil {
			return nil, err
		}
		sources = append(sources, manifest.Source{Name: path.Join(dir, e.Name), Data: data, Format: format})
	}
	slices.SortFunc(sources, func(a, b manifest.Source) int { return strings.Compare(a.Name, b.Name) })
	if len(sources) == 0 {
		return nil, fmt.Errorf("%s holds no *.yaml, *.yml or *.json files", cmpOr(dir, "the repository's root"))
	}
	return sources, nil
}

// auth returns the HTTPS credentials the secret holds, nil without one.
func (s *Syncer) auth() (transport.AuthMethod, error) {
	if s.cfg.CredentialsRef == "" {
		return nil, nil
	}
	project, name, _ := s.cfg.CredentialsRef.Split()
	v, err := s.cfg.OpenSecret(project, name)
	if err != nil {
		return nil, fmt.Errorf("gitops credentials %s: %w", s.cfg.CredentialsRef, err)
	}
	v = strings.TrimSpace(v)
	user, token, ok := strings.Cut(v, ":")
	if !ok {
		user, token = "git", v
	}
	return &githttp.BasicAuth{Username: user, Password: token}, nil
}

// redactURL drops the user info of a URL, which may hold a password.
func redactURL(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// scrub keeps a URL with user info out of an error's text.
func scrub(err error, raw string) error {
	if r := redactURL(raw); r != raw {
		return errors.New(strings.ReplaceAll(err.Error(), raw, r))
	}
	return err
}

func short(sha string) string { return sha[:min(len(sha), 12)] }

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
