package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/audit"
	"github.com/gpufleet/gpufleet/internal/model"
)

func newProjectsCmd(g *globals) *cobra.Command {
	return listCommand(g, &cobra.Command{
		Example: `  gpufleet projects
  gpufleet projects -o json
  gpufleet projects -o jsonpath='{.items[*].name}'`,
		Use:     "projects",
		Aliases: []string{"project"},
		Short:   "List the projects you hold a role in, with the role and the project's policy",
		Args:    cobra.NoArgs,
	}, func(ctx context.Context, c *client.Client, _ []string) ([]api.ProjectView, error) {
		return c.Projects(ctx)
	}, func(tw *tabwriter.Writer, ps []api.ProjectView) {
		row(tw, "PROJECT", "ROLE", "ALLOWED REGIONS", "ALLOWED GPUS", "MAX GPUS/JOB", "MAX $/H")
		for _, p := range ps {
			var s model.ProjectSpec
			if p.Spec != nil {
				s = *p.Spec
			}
			row(tw, p.Name, p.Role, dash(strings.Join(s.AllowedRegions, ",")), dash(strings.Join(s.AllowedGPUs, ",")), s.MaxGPUsPerJob, s.MaxPricePerHour)
		}
	})
}

func newRolesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Example: `  gpufleet roles list
  gpufleet roles grant alice vision member
  gpufleet roles revoke alice vision`,
		Use:   "roles",
		Short: "Grant and revoke users' roles per project (admin, project-admin, member, viewer)",
		Long: `A user is the subject of user tokens. A new user holds nothing until granted a role:
viewer reads a project's jobs and logs; member also submits and cancels them;
project-admin also manages the project's secrets; admin, granted on project "*",
does everything everywhere (tokens, users, fleet apply, queues, audit).`,
	}
	list := listCommand(g, &cobra.Command{
		Example: `  gpufleet roles list
  gpufleet roles list -o yaml`,
		Use: "list", Aliases: []string{"ls"}, Short: "List every grant", Args: cobra.NoArgs,
	}, func(ctx context.Context, c *client.Client, _ []string) ([]model.Grant, error) {
		return c.Grants(ctx)
	}, func(tw *tabwriter.Writer, gs []model.Grant) {
		row(tw, "USER", "PROJECT", "ROLE", "GRANTED")
		for _, gr := range gs {
			row(tw, gr.User, gr.Project, gr.Role, gr.CreatedAt.Local().Format("2006-01-02 15:04"))
		}
	})
	grant := &cobra.Command{
		Use:     "grant USER PROJECT ROLE",
		Short:   "Give a user a role in a project (replacing the role they held there)",
		Example: "  gpufleet roles grant alice nlp member\n  gpufleet roles grant ops '*' admin",
		Args:    cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			gr, err := c.Grant(cmd.Context(), model.Grant{User: args[0], Project: args[1], Role: model.Role(args[2])})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s is %s in %s\n", gr.User, gr.Role, gr.Project)
			for _, w := range gr.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			return nil
		},
	}
	revoke := &cobra.Command{
		Example: `  gpufleet roles revoke alice vision`,
		Use:     "revoke USER PROJECT", Short: "Remove a user's role in a project", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.RevokeGrant(cmd.Context(), args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s holds no role in %s\n", args[0], args[1])
			return nil
		},
	}
	cmd.AddCommand(list, grant, revoke)
	return cmd
}

// userView is one user as `gpufleet users` shows it.
type userView struct {
	User   string                `json:"user"`
	Roles  map[string]model.Role `json:"roles"`
	Tokens int                   `json:"tokens"`
}

func newUsersCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Example: `  gpufleet users
  gpufleet users -o json`,
		Use:   "users",
		Short: "List users (subjects of user tokens or grants) with their roles and live tokens",
		Long:  "Users are the subjects of user tokens: create one with `gpufleet tokens create NAME`, give it a role with `gpufleet roles grant`.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			gs, err := c.Grants(cmd.Context())
			if err != nil {
				return err
			}
			toks, err := c.Tokens(cmd.Context())
			if err != nil {
				return err
			}
			users := map[string]*userView{}
			get := func(u string) *userView {
				if users[u] == nil {
					users[u] = &userView{User: u, Roles: map[string]model.Role{}}
				}
				return users[u]
			}
			for _, gr := range gs {
				get(gr.User).Roles[gr.Project] = gr.Role
			}
			for _, t := range toks {
				if t.Kind == model.TokenUser && !t.Revoked {
					v := get(t.Subject)
					v.Tokens++
					if t.Admin {
						v.Roles[model.AllProjects] = model.RoleAdmin
					}
				}
			}
			list := make([]*userView, 0, len(users))
			for _, v := range users {
				list = append(list, v)
			}
			sort.Slice(list, func(i, j int) bool { return list[i].User < list[j].User })
			return render(cmd.OutOrStdout(), out, items(list), func(tw *tabwriter.Writer) {
				row(tw, "USER", "ROLES", "LIVE TOKENS")
				for _, v := range list {
					var rs []string
					for p, r := range v.Roles {
						rs = append(rs, p+"="+string(r))
					}
					sort.Strings(rs)
					row(tw, v.User, dash(strings.Join(rs, ",")), v.Tokens)
				}
			})
		},
	}
	outputFlag(cmd, &out)
	return cmd
}

func newAuditCmd(g *globals) *cobra.Command {
	var (
		out   string
		after uint64
		since string
		limit int
	)
	cmd := &cobra.Command{
		Example: `  gpufleet audit --limit 20
  gpufleet audit --since 1h -o json
  gpufleet audit verify`,
		Use:   "audit",
		Short: "Show the audit log: every mutation and every refused request (admins only)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			var from time.Time
			if since != "" {
				d, err := model.ParseDuration(since)
				if err != nil {
					if from, err = time.Parse(time.RFC3339, since); err != nil {
						return fmt.Errorf("--since: want a duration such as 1h or an RFC 3339 time")
					}
				} else {
					from = time.Now().Add(-d.D())
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			es, err := c.Audit(cmd.Context(), after, 0)
			if err != nil {
				return err
			}
			var sel []*model.AuditEntry
			for _, e := range es {
				if !e.Time.Before(from) {
					sel = append(sel, e)
				}
			}
			if limit > 0 && len(sel) > limit {
				sel = sel[len(sel)-limit:]
			}
			return render(cmd.OutOrStdout(), out, items(sel), func(tw *tabwriter.Writer) {
				row(tw, "SEQ", "TIME", "ACTOR", "TOKEN", "PROJECT", "ACTION", "OBJECT", "RESULT", "REQUEST")
				for _, e := range sel {
					row(tw, e.Seq, e.Time.Local().Format(time.RFC3339), dash(e.Actor), dash(e.TokenID), dash(e.Project), e.Action, dash(e.Object), e.Result, e.RequestID)
				}
			})
		},
	}
	outputFlag(cmd, &out)
	cmd.Flags().Uint64Var(&after, "after", 0, "only entries with a higher sequence number")
	cmd.Flags().StringVar(&since, "since", "", "only entries since a time (RFC 3339) or for a duration back (1h)")
	cmd.Flags().IntVar(&limit, "limit", 0, "show only the newest N entries")
	verify := &cobra.Command{
		Example: `  gpufleet audit verify`,
		Use:     "verify",
		Short:   "Check the audit log's hash chain: any edited, deleted or reordered entry is reported",
		Long: `Reads the whole audit log through the API and recomputes its hash chain.
Each entry's hash is SHA-256(previous hash || the entry's canonical JSON), so an
entry edited or deleted in the database breaks the chain from there on. Exits
non-zero, naming the first broken entry, when the log has been tampered with.
Truncating the newest entries can only be detected against a head hash noted
earlier: the command prints the head so you can keep it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			es, err := c.Audit(cmd.Context(), 0, 0)
			if err != nil {
				return err
			}
			if err := audit.Verify(es); err != nil {
				return err
			}
			head := "(empty)"
			if len(es) > 0 {
				head = fmt.Sprintf("entry %d, hash %s", es[len(es)-1].Seq, es[len(es)-1].Hash)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "audit log intact: %d entries; head %s\n", len(es), head)
			return nil
		},
	}
	cmd.AddCommand(verify)
	return cmd
}

func newRotateAdminCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Example: `  gpufleet tokens rotate-admin
  GPUFLEET_TOKEN=gfu_… gpufleet tokens rotate-admin`,
		Use:   "rotate-admin",
		Short: "Replace the admin token `up` created: the old one stops working at once",
		Long: `Mints a new token like the one in use (GPUFLEET_TOKEN, or the data dir's admin.token),
revokes the old one, and writes the new secret to admin.token (mode 0600). When the
token came from GPUFLEET_TOKEN, the new secret is printed instead: it is shown only once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			created, err := c.RotateToken(cmd.Context())
			if err != nil {
				return err
			}
			if os.Getenv("GPUFLEET_TOKEN") != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "rotated %s; new secret (shown only now): %s\n", created.Token.ID, created.Secret)
				return nil
			}
			path := filepath.Join(g.dataDir, tokenFile)
			if err := writeSecretFile(path, created.Secret+"\n"); err != nil {
				return fmt.Errorf("the old token is revoked but the new one could not be saved (secret: %s): %w", created.Secret, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rotated: %s is now %s (expires %s); the old token is revoked\n", path, created.Token.ID, created.Token.ExpiresAt.Local().Format(time.RFC3339))
			return nil
		},
	}
}

// writeSecretFile replaces path with data, mode 0600, atomically.
func writeSecretFile(path, data string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".secret-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	_, werr := tmp.WriteString(data)
	serr := tmp.Sync()
	if err := errors.Join(werr, serr, tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
