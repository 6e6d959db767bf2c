package main

import (
	"fmt"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/store/sqlite"
)

func newStoreCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "store", Short: "Examine the data dir's database", Example: `  gpufleet store check
  gpufleet store check --data-dir /var/lib/gpufleet`}
	var output string
	check := &cobra.Command{
		Use:   "check",
		Short: "Check the database: SQLite's integrity check, and that it holds every acknowledged commit",
		Long: `Check the data dir's database without writing it (safe while a server runs): SQLite's
integrity check, and its count of commits against the mark of the last acknowledged commit
kept beside it (gpufleet.db.hwm). A database below its mark has lost acknowledged writes: its
WAL was damaged or removed, or it was replaced by an older copy. The server refuses to start
on such a database unless given --accept-lost-writes. Exits 1 when it finds a problem.`,
		Example: "  gpufleet store check\n  gpufleet store check -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			rep, err := sqlite.Check(cmd.Context(), filepath.Join(g.dataDir, dbFile))
			if err != nil {
				return err
			}
			if err := render(cmd.OutOrStdout(), output, rep, func(tw *tabwriter.Writer) {
				at := func(t time.Time) string {
					if t.IsZero() {
						return "-"
					}
					return t.Local().Format(time.RFC3339)
				}
				mark := "missing"
				if rep.MarkFound {
					mark = fmt.Sprintf("#%d at %s", rep.Mark, at(rep.MarkAt))
				}
				row(tw, "DATABASE", rep.Path)
				row(tw, "SCHEMA", rep.SchemaVersion)
				row(tw, "INTEGRITY", fmt.Sprint(rep.Integrity))
				row(tw, "COMMITS", fmt.Sprintf("#%d at %s", rep.Commits, at(rep.CommitAt)))
				row(tw, "ACKNOWLEDGED", mark)
				if len(rep.Problems) == 0 {
					row(tw, "RESULT", "ok")
				}
				for _, p := range rep.Problems {
					row(tw, "PROBLEM", p)
				}
			}); err != nil {
				return err
			}
			if len(rep.Problems) > 0 {
				return exitError{code: 1}
			}
			return nil
		},
	}
	outputFlag(check, &output)
	cmd.AddCommand(check)
	return cmd
}
