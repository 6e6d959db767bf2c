package main

import (
	"runtime"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
)

// versions is what `gpufleet version` reports.
type versions struct {
	Client api.VersionInfo  `json:"client"`
	Server *api.VersionInfo `json:"server,omitempty"`
	// ServerError says why the server's version is missing.
	ServerError string `json:"serverError,omitempty"`
}

func newVersionCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Example: `  gpufleet version
  gpufleet version -o json`,
		Use:   "version",
		Short: "Print the client's version and, when one is reachable, the server's",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			v := versions{Client: api.VersionInfo{Version: version, GoVersion: runtime.Version(), APIVersion: "v1"}}
			if c, err := g.client(); err != nil {
				v.ServerError = err.Error()
			} else if sv, err := c.Version(cmd.Context()); err != nil {
				v.ServerError = err.Error()
			} else {
				v.Server = &sv
			}
			return render(cmd.OutOrStdout(), out, v, func(tw *tabwriter.Writer) {
				row(tw, "Client:", v.Client.Version, v.Client.GoVersion)
				if v.Server != nil {
					row(tw, "Server:", v.Server.Version, v.Server.GoVersion)
				} else {
					row(tw, "Server:", "unreachable: "+v.ServerError)
				}
			})
		},
	}
	outputFlag(cmd, &out)
	return cmd
}
