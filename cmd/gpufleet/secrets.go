package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/secrets"
)

func newSecretsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Example: `  echo -n "$HF_TOKEN" | gpufleet secrets set vision HF_TOKEN
  gpufleet secrets list vision
  gpufleet run --secret HF_TOKEN --project vision -- python train.py`,
		Use:     "secrets",
		Aliases: []string{"secret"},
		Short:   "Manage a project's job secrets (sealed at rest, never shown again)",
		Long: `Job secrets are values a project's jobs get as environment variables
(spec.run.secrets: [NAME]). They are sealed with AES-256-GCM under a key kept
outside the database (the data dir's secrets.key, or GPUFLEET_SECRET_KEYS), and
the API never returns a value once written. Project admins manage them.

To rotate the sealing key: append a new key line to secrets.key (gpufleet
secrets new-key prints one), restart the server, run 'gpufleet secrets
reseal', then remove the old line and restart again.`,
	}
	var fromFile, out string
	set := &cobra.Command{
		Use:   "set PROJECT NAME",
		Short: "Write a secret, reading the value from stdin or --from-file (never from a flag)",
		Example: `  printf %s "$HF_TOKEN" | gpufleet secrets set nlp HF_TOKEN
  gpufleet secrets set nlp WANDB_API_KEY --from-file ~/.wandb-key`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r io.Reader = cmd.InOrStdin()
			if fromFile != "" {
				f, err := os.Open(fromFile)
				if err != nil {
					return fmt.Errorf("--from-file: %w", err)
				}
				defer f.Close()
				r = f
			}
			value, err := io.ReadAll(io.LimitReader(r, model.MaxSecretBytes+1))
			if err != nil {
				return fmt.Errorf("reading the secret: %w", err)
			}
			value = []byte(strings.TrimRight(string(value), "\r\n"))
			if len(value) == 0 {
				return errors.New("empty secret: pipe the value to stdin or use --from-file")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			info, err := c.PutSecret(cmd.Context(), args[0], args[1], value)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "secret %s/%s written (version %d)\n", info.Project, info.Name, info.Version)
			return nil
		},
	}
	set.Flags().StringVar(&fromFile, "from-file", "", "read the value from this file (one trailing newline is dropped)")
	list := &cobra.Command{
		Example: `  gpufleet secrets list vision
  gpufleet secrets list vision -o json`,
		Use:   "list PROJECT",
		Short: "List a project's secrets: names and versions, never values",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.Secrets(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return render(cmd.OutOrStdout(), out, items(list), func(tw *tabwriter.Writer) {
				row(tw, "NAME", "VERSION", "UPDATED")
				for _, s := range list {
					row(tw, s.Name, fmt.Sprint(s.Version), s.UpdatedAt.Local().Format(time.RFC3339))
				}
			})
		},
	}
	outputFlag(list, &out)
	del := &cobra.Command{
		Example: `  gpufleet secrets delete vision HF_TOKEN`,
		Use:     "delete PROJECT NAME",
		Short:   "Delete a secret (running jobs keep the value they started with)",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			return c.DeleteSecret(cmd.Context(), args[0], args[1])
		},
	}
	reseal := &cobra.Command{
		Example: `  gpufleet secrets new-key
  gpufleet secrets reseal`,
		Use:   "reseal",
		Short: "Re-seal every secret with the newest key in the server's key file (admins)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			n, err := c.ResealSecrets(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d secrets re-sealed with the newest key\n", n)
			return nil
		},
	}
	newKey := &cobra.Command{
		Example: `  gpufleet secrets new-key
  gpufleet secrets reseal`,
		Use:   "new-key",
		Short: "Print a fresh sealing key, to append to secrets.key when rotating",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := secrets.NewKey()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), k)
			return nil
		},
	}
	cmd.AddCommand(set, list, del, reseal, newKey)
	return cmd
}
