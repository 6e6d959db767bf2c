package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

func newTokensCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Example: `  gpufleet tokens create alice --ttl 30d
  gpufleet tokens create node-7 --kind agent
  gpufleet tokens list
  gpufleet tokens revoke TOKEN-ID`,
		Use:     "tokens",
		Aliases: []string{"token"},
		Short:   "Create, list and revoke API tokens",
	}
	var (
		out   string
		req   api.TokenCreate
		kind  string
		ttl   string
		lsOut string
	)
	create := &cobra.Command{
		Use:   "create SUBJECT",
		Short: "Create a token for a user or an agent's node; the secret is shown once",
		Example: `  gpufleet tokens create alice --ttl 30d
  gpufleet tokens create n-abcdefghij --kind agent --ttl 90d
  gpufleet tokens create edge-1 --kind proxy --ttl 90d`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			d, err := model.ParseDuration(ttl)
			if err != nil {
				return fmt.Errorf("--ttl: %w", err)
			}
			req.Subject, req.Kind, req.TTL = args[0], model.TokenKind(kind), d
			c, err := g.client()
			if err != nil {
				return err
			}
			created, err := c.CreateToken(cmd.Context(), req)
			if err != nil {
				return err
			}
			return render(cmd.OutOrStdout(), out, created, func(tw *tabwriter.Writer) {
				row(tw, "ID:", created.Token.ID)
				row(tw, "Expires:", created.Token.ExpiresAt.Local().Format(time.RFC3339))
				row(tw, "Secret:", created.Secret)
				row(tw, "", "(shown only now: store it safely)")
			})
		},
	}
	outputFlag(create, &out)
	create.Flags().StringVar(&kind, "kind", "user", "token kind: user, agent, or proxy (a separate gpufleet proxy: it reads the services' endpoints and nothing else)")
	create.Flags().StringVar(&ttl, "ttl", "30d", "lifetime (every token expires; at most 366d)")
	create.Flags().StringVar(&req.Name, "name", "", "a note on what the token is for")
	create.Flags().BoolVar(&req.Admin, "admin", false, "let a user token manage tokens")

	list := &cobra.Command{
		Example: `  gpufleet tokens list
  gpufleet tokens list -o json`,
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List tokens that have not expired (never their secrets)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(lsOut); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			toks, err := c.Tokens(cmd.Context())
			if err != nil {
				return err
			}
			return render(cmd.OutOrStdout(), lsOut, items(toks), func(tw *tabwriter.Writer) {
				row(tw, "ID", "KIND", "SUBJECT", "NAME", "ADMIN", "EXPIRES", "REVOKED")
				for _, t := range toks {
					row(tw, t.ID, t.Kind, t.Subject, dash(t.Name), t.Admin, t.ExpiresAt.Local().Format("2006-01-02 15:04"), t.Revoked)
				}
			})
		},
	}
	outputFlag(list, &lsOut)

	revoke := &cobra.Command{
		Use:     "revoke TOKEN-ID",
		Short:   "Revoke a token at once",
		Example: `  gpufleet tokens revoke tok-0123456789ab`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.RevokeToken(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, list, revoke, newRotateAdminCmd(g))
	return cmd
}
