package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/model"
)

func newArtifactsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "artifacts",
		Aliases: []string{"artifact", "artefacts"},
		Short:   "List, fetch, push and delete a project's checkpoints and model files",
		Long: `Artefacts are a project's job checkpoints (uploaded by the nodes as jobs
write LATEST) and folders pushed under a name (model files), versioned, in the
fleet's object storage, sealed with the project's data key (docs/artifacts.md).
The server streams them: files are verified (SHA-256 from the manifest) as they
are read. Viewers list and get, members push, project admins delete.`,
		Example: `  gpufleet artifacts list --project vision
  gpufleet artifacts get j-1a2b3c --step 1200 -o ./ckpt
  gpufleet artifacts push resnet50 ./out --tag release --project vision`,
	}
	cmd.AddCommand(newArtifactsListCmd(g), newArtifactsGetCmd(g), newArtifactsPushCmd(g), newArtifactsDeleteCmd(g))
	return cmd
}

// artifactProject is the project a command acts on: --project (or the
// context's), else the project of the job it names.
func artifactProject(cmd *cobra.Command, g *globals, c *client.Client, job string) (string, error) {
	if p := g.defaultProject(); p != "" {
		return p, nil
	}
	if job != "" {
		v, err := c.Job(cmd.Context(), job)
		if err != nil {
			return "", err
		}
		return v.Project, nil
	}
	return "", usageError{err: errors.New("name the project: --project PROJECT (or gpufleet config set-project)")}
}

// refOf reads JOB or NAME and the version flags.
func refOf(arg string, step int64, stepSet bool, version, tag string) (model.ArtifactRef, error) {
	if strings.HasPrefix(arg, "j-") {
		if version != "" || tag != "" {
			return model.ArtifactRef{}, usageError{err: errors.New("a job's checkpoints are chosen with --step, not --version or --tag")}
		}
		r := model.ArtifactRef{Job: arg}
		if stepSet {
			r.Version = strconv.FormatInt(step, 10)
		}
		return r, nil
	}
	if stepSet {
		return model.ArtifactRef{}, usageError{err: fmt.Errorf("%s is not a job id (j-…): --step is for checkpoints; use --version or --tag", arg)}
	}
	if version != "" && tag != "" {
		return model.ArtifactRef{}, usageError{err: errors.New("--version and --tag exclude each other")}
	}
	r := model.ArtifactRef{Name: arg, Version: version}
	if tag != "" {
		r.Version = "@" + tag
	}
	return r, nil
}

func newArtifactsListCmd(g *globals) *cobra.Command {
	var out, job, name, kind string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List checkpoints and pushed artefacts, newest first",
		Example: `  gpufleet artifacts list --project vision
  gpufleet artifacts list --job j-1a2b3c -o json
  gpufleet artifacts list --name resnet50 --kind model -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			project, err := artifactProject(cmd, g, c, job)
			if err != nil {
				return err
			}
			list, err := c.Artifacts(cmd.Context(), project, model.ArtifactFilter{Job: job, Name: name, Kind: kind})
			if err != nil {
				return err
			}
			return render(cmd.OutOrStdout(), out, items(list), func(tw *tabwriter.Writer) {
				row(tw, "KIND", "JOB/NAME", "VERSION", "STEP", "LATEST", "TAGS", "FILES", "SIZE", "UPLOADED")
				for _, a := range list {
					id, step := a.Name, "-"
					if a.Kind == model.ArtifactCheckpoint {
						id, step = a.Job, strconv.FormatInt(a.Step, 10)
					}
					latest := ""
					if a.Latest {
						latest = "*"
					}
					row(tw, a.Kind, id, a.Version, step, latest, strings.Join(a.Tags, ","), a.Count, humanBytes(a.Bytes), a.Uploaded.Local().Format(time.RFC3339))
				}
			})
		},
	}
	outputFlag(cmd, &out)
	cmd.Flags().StringVar(&job, "job", "", "only this job's checkpoints (and artefacts pushed from it)")
	cmd.Flags().StringVar(&name, "name", "", "only this pushed artefact")
	cmd.Flags().StringVar(&kind, "kind", "", "checkpoint or model")
	return cmd
}

func newArtifactsGetCmd(g *globals) *cobra.Command {
	var dir, version, tag string
	var step int64
	cmd := &cobra.Command{
		Use:   "get JOB|NAME -o DIR",
		Short: "Download a checkpoint (latest, or --step) or a pushed artefact (newest, --version or --tag) into a folder, verified",
		Example: `  gpufleet artifacts get j-1a2b3c -o ./ckpt                 # the latest checkpoint
  gpufleet artifacts get j-1a2b3c --step 1200 -o ./ckpt
  gpufleet artifacts get resnet50 --tag release -o ./model --project vision`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return usageError{err: errors.New("name the folder to write: -o DIR")}
			}
			ref, err := refOf(args[0], step, cmd.Flags().Changed("step"), version, tag)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			project, err := artifactProject(cmd, g, c, ref.Job)
			if err != nil {
				return err
			}
			a, err := c.Artifact(cmd.Context(), project, ref)
			if err != nil {
				return err
			}
			if ref.Job != "" && ref.Version == "" {
				ref.Version = strconv.FormatInt(a.Step, 10) // the files of this checkpoint, even if a newer one lands
			} else if ref.Name != "" {
				ref.Version = a.Version
			}
			start := time.Now()
			if err := fetchArtifact(cmd, c, project, ref, a, dir); err != nil {
				return err
			}
			what := fmt.Sprintf("%s version %s", a.Name, a.Version)
			if a.Kind == model.ArtifactCheckpoint {
				what = fmt.Sprintf("checkpoint of %s at step %d", a.Job, a.Step)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d files, %s verified into %s in %s\n", what, a.Count, humanBytes(a.Bytes), dir, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().StringVarP(&dir, "output", "o", "", "folder to write the files into (created; existing files are not overwritten)")
	cmd.Flags().Int64Var(&step, "step", 0, "a checkpoint's step (default: the job's latest)")
	cmd.Flags().StringVar(&version, "version", "", "a pushed artefact's version (default: the newest)")
	cmd.Flags().StringVar(&tag, "tag", "", "the newest version of a pushed artefact with this tag")
	return cmd
}

// fetchArtifact writes a's files under dir, each through a temporary file
// renamed into place only once verified.
func fetchArtifact(cmd *cobra.Command, c *client.Client, project string, ref model.ArtifactRef, a *model.Artifact, dir string) error {
	root, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for _, f := range a.Files {
		dst := filepath.Join(root, filepath.FromSlash(f.Path))
		if rel, err := filepath.Rel(root, dst); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return fmt.Errorf("%s: a path outside the folder; refusing", f.Path)
		}
		if _, err := os.Lstat(dst); err == nil {
			return fmt.Errorf("%s exists; choose an empty folder", dst)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		tmp, err := os.CreateTemp(filepath.Dir(dst), ".gpufleet-get-*")
		if err != nil {
			return err
		}
		err = c.ArtifactFile(cmd.Context(), project, ref, f, tmp)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			mode := fs.FileMode(f.Mode & 0o777)
			if mode == 0 {
				mode = 0o644
			}
			if err = os.Chmod(tmp.Name(), mode); err == nil {
				err = os.Rename(tmp.Name(), dst)
			}
		}
		if err != nil {
			os.Remove(tmp.Name())
			return err
		}
	}
	return nil
}

func newArtifactsPushCmd(g *globals) *cobra.Command {
	var tags []string
	var job string
	cmd := &cobra.Command{
		Use:   "push NAME DIR",
		Short: "Push a folder as a new version of a named artefact (only content the storage lacks is sent)",
		Example: `  gpufleet artifacts push resnet50 ./out --project vision
  gpufleet artifacts push resnet50 ./out --tag release --job j-1a2b3c`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if msg := model.CheckArtifactName(args[0]); msg != "" {
				return usageError{err: fmt.Errorf("NAME: %s", msg)}
			}
			root, err := os.OpenRoot(args[1])
			if err != nil {
				return fmt.Errorf("DIR: %w", err)
			}
			defer root.Close()
			p := model.ArtifactPush{Tags: tags, Job: job}
			var total int64
			err = fs.WalkDir(root.FS(), ".", func(rel string, e fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if !e.Type().IsRegular() {
					return nil // folders are implied; links are not followed
				}
				f, err := root.Open(rel)
				if err != nil {
					return err
				}
				defer f.Close()
				info, err := f.Stat()
				if err != nil {
					return err
				}
				h := sha256.New()
				n, err := io.Copy(h, f)
				if err != nil {
					return err
				}
				total += n
				p.Files = append(p.Files, model.ArtifactFile{Path: rel, Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), Mode: uint32(info.Mode().Perm())})
				return nil
			})
			if err != nil {
				return fmt.Errorf("reading %s: %w", args[1], err)
			}
			if len(p.Files) == 0 {
				return fmt.Errorf("%s holds no files", args[1])
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			project, err := artifactProject(cmd, g, c, job)
			if err != nil {
				return err
			}
			start := time.Now()
			a, sent, err := c.PushArtifact(cmd.Context(), project, args[0], p, func(f model.ArtifactFile) (io.ReadCloser, error) {
				return root.Open(filepath.FromSlash(f.Path))
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pushed %s version %s: %d files, %s (%s sent) in %s\n", a.Name, a.Version, a.Count, humanBytes(total), humanBytes(sent), time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&tags, "tag", nil, "tag the version (repeatable); retention keeps versions tagged release")
	cmd.Flags().StringVar(&job, "job", "", "the job the files came from (shown in lists)")
	return cmd
}

func newArtifactsDeleteCmd(g *globals) *cobra.Command {
	var step int64
	var version, tag string
	var all bool
	cmd := &cobra.Command{
		Use:   "delete JOB --step N | NAME --version V|--tag T|--all",
		Short: "Delete a checkpoint or versions of a pushed artefact (project admins); storage is reclaimed by the next retention round",
		Example: `  gpufleet artifacts delete j-1a2b3c --step 1200
  gpufleet artifacts delete resnet50 --version 20261206-155725.463375-c15f
  gpufleet artifacts delete resnet50 --all --project vision`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := refOf(args[0], step, cmd.Flags().Changed("step"), version, tag)
			if err != nil {
				return err
			}
			switch {
			case ref.Job != "" && ref.Version == "":
				return usageError{err: errors.New("name the checkpoint to delete: --step N")}
			case ref.Name != "" && ref.Version == "" && !all:
				return usageError{err: errors.New("name what to delete: --version V, --tag T or --all")}
			case ref.Name != "" && ref.Version != "" && all:
				return usageError{err: errors.New("--all deletes every version; drop --version/--tag")}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			project, err := artifactProject(cmd, g, c, ref.Job)
			if err != nil {
				return err
			}
			n, err := c.DeleteArtifact(cmd.Context(), project, ref, all)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %d\n", n)
			return nil
		},
	}
	cmd.Flags().Int64Var(&step, "step", 0, "the checkpoint's step")
	cmd.Flags().StringVar(&version, "version", "", "the version to delete")
	cmd.Flags().StringVar(&tag, "tag", "", "delete the newest version with this tag")
	cmd.Flags().BoolVar(&all, "all", false, "delete every version of the artefact")
	return cmd
}
