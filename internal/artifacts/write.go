package artifacts

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/objstore"
)

// versionTime is the time part of a version ("20261206-155725.123456").
const versionTime = "20060102-150405.000000"

// maxFiles bounds the files of one pushed version.
const maxFiles = 100000

func checkSHA(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size && s == strings.ToLower(s)
}

// PutObject stores size bytes of r, whose SHA-256 is sum (hex), as
// content of the pushed artefact name of project: sealed, under its
// opaque name. Content that does not match sum is removed and refused.
func (c *Catalog) PutObject(ctx context.Context, project, name, sum string, size int64, r io.Reader) error {
	var fe model.FieldErrors
	if msg := model.CheckArtifactName(name); msg != "" {
		fe.Add("path.name", msg)
	}
	if !checkSHA(sum) {
		fe.Add("path.sha256", fmt.Sprintf("%q must be a SHA-256 in lower-case hex (64 digits)", sum))
	}
	if size < 0 {
		fe.Add("header.Content-Length", "the object's length must be sent")
	}
	if len(fe) > 0 {
		return fe
	}
	pl, err := c.pushPlace(ctx, project)
	if err != nil {
		return err
	}
	raw, _ := hex.DecodeString(sum)
	key := ckptsync.ObjectKey(setID(pl.seal, name)+"/", pl.seal.Name(raw))
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(r, size), h)
	if _, err := pl.store.Put(ctx, key, pl.seal.Seal(src, key), objstore.SealedSize(size)); err != nil {
		return fmt.Errorf("storing content %s of artefact %s: %w", sum, name, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		if err := pl.store.Delete(context.WithoutCancel(ctx), key); err != nil {
			c.cfg.Log.Error("removing an object whose content did not match its name", "object", key, "err", err)
		}
		return model.FieldErrors{{Path: "body", Message: fmt.Sprintf("content's sha256 is %s, not the %s named in the path (or shorter than Content-Length)", got, sum)}}
	}
	return nil
}

// Commit makes push a new version of project's artefact name, when every
// file's content is stored; otherwise it returns the SHA-256s still
// missing (send them with PutObject, then commit again) and creates
// nothing.
func (c *Catalog) Commit(ctx context.Context, project, name string, push model.ArtifactPush) (*model.Artifact, []string, error) {
	if err := c.checkPush(project, name, push); err != nil {
		return nil, nil, err
	}
	l := c.projectLock(project)
	l.Lock()
	defer l.Unlock()
	pl, err := c.pushPlace(ctx, project)
	if err != nil {
		return nil, nil, err
	}
	set := setID(pl.seal, name)
	versions, err := c.set(ctx, pl, set)
	if err != nil {
		return nil, nil, corrupt(err)
	}
	referenced := map[string]bool{}
	for _, e := range versions {
		for _, f := range e.m.Files {
			referenced[f.Object] = true
		}
	}
	m := ckptsync.Manifest{Version: 1, JobID: push.Job, Name: name, Tags: push.Tags, Time: c.cfg.Clock.Now().UTC()}
	var missing []string
	asked := map[string]bool{}
	for _, f := range push.Files {
		raw, _ := hex.DecodeString(f.SHA256)
		obj := pl.seal.Name(raw)
		m.Files = append(m.Files, ckptsync.File{Path: f.Path, Size: f.Size, SHA256: f.SHA256, Object: obj, Mode: f.Mode & 0o777})
		if referenced[obj] || asked[f.SHA256] {
			continue
		}
		st, err := pl.store.Stat(ctx, ckptsync.ObjectKey(set+"/", obj))
		switch {
		case err == nil && st.Size == objstore.SealedSize(f.Size) && c.cfg.Clock.Now().Sub(st.Modified) < ckptsync.ReuseWindow:
			// Sent just now (or recently): reuse.
		case err == nil || errors.Is(err, objstore.ErrNotFound):
			missing = append(missing, f.SHA256)
			asked[f.SHA256] = true
		default:
			return nil, nil, err
		}
	}
	if len(missing) > 0 {
		return nil, missing, nil
	}
	slices.SortFunc(m.Files, func(a, b ckptsync.File) int { return strings.Compare(a.Path, b.Path) })
	now := c.cfg.Clock.Now().UTC().Truncate(time.Microsecond)
	m.Uploaded = now
	// Versions sort as they were pushed: after the newest, even when the
	// clock says otherwise (the project's lock serialises commits).
	if es := versions; len(es) > 0 && len(es[0].m.Release) >= len(versionTime) {
		if prev, err := time.Parse(versionTime, es[0].m.Release[:len(versionTime)]); err == nil && !now.After(prev) {
			now = prev.Add(time.Microsecond)
		}
	}
	var rnd [2]byte
	_, _ = rand.Read(rnd[:])
	m.Release = now.Format(versionTime) + "-" + hex.EncodeToString(rnd[:])
	idx := indexPrefix(pl.seal)
	marker := idx + set + "/" + setMarker
	if _, err := pl.store.Put(ctx, marker, pl.seal.Seal(bytes.NewReader(nil), marker), objstore.SealedSize(0)); err != nil {
		return nil, nil, err
	}
	key := idx + set + "/" + m.Release
	c.touchSet(project, pl, set) // even when the write fails: it may have landed
	if _, err := ckptsync.WriteManifest(ctx, pl.store, pl.seal, key, m); err != nil {
		return nil, nil, err
	}
	a := view(project, model.ArtifactModel, pl.desc, m, true)
	a.Latest = true
	return &a, nil, nil
}

func (c *Catalog) checkPush(project, name string, push model.ArtifactPush) error {
	var fe model.FieldErrors
	if msg := model.CheckArtifactName(name); msg != "" {
		fe.Add("path.name", msg)
	}
	for i, t := range push.Tags {
		if msg := model.CheckArtifactTag(t); msg != "" {
			fe.Add(fmt.Sprintf("tags[%d]", i), msg)
		}
	}
	if push.Job != "" {
		if err := c.checkJob(project, push.Job); err != nil {
			fe.Add("job", err.Error())
		}
	}
	if len(push.Files) == 0 {
		fe.Add("files", "a push needs at least one file")
	}
	if len(push.Files) > maxFiles {
		fe.Add("files", fmt.Sprintf("at most %d files", maxFiles))
	}
	seen := map[string]bool{}
	for i, f := range push.Files {
		p := fmt.Sprintf("files[%d]", i)
		if err := objstore.CheckKey(f.Path); err != nil {
			fe.Add(p+".path", fmt.Sprintf("%q must be a relative, slash-separated path without empty, '.' or '..' segments", f.Path))
		} else if seen[f.Path] {
			fe.Add(p+".path", fmt.Sprintf("%q is listed twice", f.Path))
		}
		seen[f.Path] = true
		if !checkSHA(f.SHA256) {
			fe.Add(p+".sha256", fmt.Sprintf("%q must be a SHA-256 in lower-case hex", f.SHA256))
		}
		if f.Size < 0 {
			fe.Add(p+".size", "must not be negative")
		}
	}
	if len(fe) > 0 {
		return fe
	}
	return nil
}

// Delete removes what r names: a checkpoint (every manifest of that step;
// the job's latest only once the job has ended) or a pushed artefact's
// version ("" Version with All: every version). Objects no manifest names
// any more go at the next retention round. It returns how many versions
// it removed.
func (c *Catalog) Delete(ctx context.Context, project string, r Ref, all bool) (int, error) {
	l := c.projectLock(project)
	l.Lock()
	defer l.Unlock()
	if r.Name != "" && all {
		if msg := model.CheckArtifactName(r.Name); msg != "" {
			return 0, model.FieldErrors{{Path: "path.name", Message: msg}}
		}
		places, err := c.places(ctx, project)
		if err != nil {
			return 0, err
		}
		n := 0
		for _, pl := range places {
			set := setID(pl.seal, r.Name)
			versions, err := c.set(ctx, pl, set)
			if err != nil {
				return n, corrupt(err)
			}
			c.touchSet(project, pl, set)
			for _, e := range versions {
				if err := pl.store.Delete(ctx, e.key); err != nil {
					return n, err
				}
				n++
			}
		}
		if n == 0 {
			return 0, fmt.Errorf("artefact %s in project %s: %w", r.Name, project, model.ErrNotFound)
		}
		return n, nil
	}
	f, err := c.resolve(ctx, project, r)
	if err != nil {
		return 0, err
	}
	if r.Name != "" {
		c.touchSet(project, f.pl, strings.TrimSuffix(f.prefix, "/"))
		return 1, f.pl.store.Delete(ctx, f.key)
	}
	c.touchJob(project, f.pl, r.Job)
	es, err := c.checkpoints(ctx, f.pl, f.prefix)
	if err != nil {
		return 0, corrupt(err)
	}
	n := 0
	for _, e := range es {
		if e.m.Step != f.m.Step {
			continue
		}
		if e.latest {
			if j, err := c.cfg.Fleet.Job(r.Job); err == nil && !j.State.Terminal() {
				return n, fmt.Errorf("step %d is job %s's latest checkpoint, which a resume restores; it can be deleted once the job has ended: %w", e.m.Step, r.Job, model.ErrConflict)
			}
			if err := f.pl.store.Delete(ctx, ckptsync.LatestKey(f.prefix)); err != nil {
				return n, err
			}
		}
		if err := f.pl.store.Delete(ctx, e.key); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
