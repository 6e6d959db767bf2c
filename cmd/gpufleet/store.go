package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/datadir"
	"github.com/gpufleet/gpufleet/internal/server"
	"github.com/gpufleet/gpufleet/internal/store/postgres"
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
	cmd.AddCommand(check, newStoreMigrateCmd(g), newStoreBackupCmd(g))
	return cmd
}

func newStoreMigrateCmd(g *globals) *cobra.Command {
	var from, to, output string
	cmd := &cobra.Command{
		Use:   "migrate --to postgres://…",
		Short: "Copy a SQLite database into a new PostgreSQL database, verified",
		Long: `Copies every table of a SQLite database (default: the data dir's) into an empty PostgreSQL
database in one transaction, then verifies the copy: each table's row count, and the audit log's
hash chain read back from PostgreSQL up to the source's head. The server must be stopped (the data
dir's lock is taken for the copy). Afterwards start the server with --store or GPUFLEET_STORE
naming the PostgreSQL database. The --to DSN defaults to GPUFLEET_STORE, which keeps its password
out of the process list.`,
		Example: "  GPUFLEET_STORE=postgres://gpufleet:…@db/gpufleet gpufleet store migrate\n  gpufleet store migrate --from sqlite:/backup/gpufleet.db --to postgres://gpufleet@db/gpufleet",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if from == "" {
				from = "sqlite:" + filepath.Join(g.dataDir, dbFile)
			}
			path, ok := strings.CutPrefix(from, "sqlite:")
			if !ok || path == "" {
				return fmt.Errorf("--from: must be sqlite:PATH")
			}
			if to == "" {
				to = os.Getenv(server.StoreEnv)
			}
			if !postgres.IsDSN(to) {
				return fmt.Errorf("--to: must be a postgres:// URL (or set %s)", server.StoreEnv)
			}
			// No server may write the source while it is copied.
			lock, err := datadir.Acquire(filepath.Dir(path))
			if err != nil {
				return err
			}
			defer lock.Release()
			src, err := sqlite.OpenExport(cmd.Context(), path)
			if err != nil {
				return err
			}
			defer src.Close()
			dst, err := postgres.Open(cmd.Context(), to, postgres.Options{})
			if err != nil {
				return err
			}
			defer dst.Close()
			rep, err := dst.Import(cmd.Context(), src)
			if err != nil {
				return err
			}
			return render(cmd.OutOrStdout(), output, rep, func(tw *tabwriter.Writer) {
				row(tw, "TABLE", "SQLITE", "POSTGRESQL")
				for _, t := range rep.Tables {
					row(tw, t.Table, t.Source, t.Target)
				}
				row(tw, "AUDIT", fmt.Sprintf("chain intact: %d entries, head %s", rep.AuditEntries, dash(rep.AuditHead)), "")
				row(tw, "TO", postgres.Describe(to), "")
			})
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the SQLite database, as sqlite:PATH (default: the data dir's)")
	cmd.Flags().StringVar(&to, "to", "", "the PostgreSQL database, a postgres:// URL (default env "+server.StoreEnv+")")
	outputFlag(cmd, &output)
	return cmd
}

func newStoreBackupCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "backup DEST",
		Short: "Write a consistent copy of the SQLite database, safe while the server runs",
		Long: `Writes a consistent copy of the data dir's SQLite database to DEST (a new file) with SQLite's
VACUUM INTO: one committed state, compacted, with no WAL to carry, taken while the server runs.
The commit mark is written beside it (DEST.hwm), so the two restore together: stop the server,
put DEST and DEST.hwm in place of gpufleet.db and gpufleet.db.hwm (removing gpufleet.db-wal),
start it. PostgreSQL databases are backed up with PostgreSQL's own tools (docs/postgres.md).`,
		Example: "  gpufleet store backup /backup/gpufleet-$(date +%F).db",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := sqlite.Backup(cmd.Context(), filepath.Join(g.dataDir, dbFile), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up commit #%d to %s (mark %s)\n", seq, args[0], args[0]+sqlite.MarkSuffix)
			return nil
		},
	}
}
