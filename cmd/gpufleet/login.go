package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/cliconfig"
)

func newLoginCmd(g *globals) *cobra.Command {
	var name, ca string
	var tokenStdin bool
	cmd := &cobra.Command{
		Use:   "login SERVER",
		Short: "Save a server and token as a CLI context and make it current",
		Long: `Checks the token against SERVER, then saves both as a context in the CLI config
(~/.config/gpufleet/config.yaml, written 0600) and makes it the current one, so
later commands need neither GPUFLEET_SERVER nor GPUFLEET_TOKEN. On a terminal the
token is asked for without echo; in scripts pass it on standard input with
--token-stdin. When the token holds a role in exactly one project, that project
becomes the context's default (change it with 'gpufleet config set-project').`,
		Example: `  gpufleet login https://fleet.example:7777
  echo "$TOKEN" | gpufleet login https://fleet.example:7777 --token-stdin --name prod --project vision
  gpufleet login https://fleet.example:7777 --certificate-authority ~/fleet-ca.pem`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			server := strings.TrimRight(args[0], "/")
			if err := cliconfig.CheckServer(server); err != nil {
				return usageError{fmt.Errorf("SERVER: %w", err)}
			}
			token, err := readToken(cmd, tokenStdin)
			if err != nil {
				return err
			}
			t := target{server: server, token: token, ca: ca}
			c, err := clientFor(t, "")
			if err != nil {
				return err
			}
			projects, err := c.Projects(cmd.Context())
			if err != nil {
				if client.StatusOf(err) == 401 {
					return fmt.Errorf("%s refused this token (unknown, revoked or expired): check it, or ask an admin for a new one with `gpufleet tokens create`", server)
				}
				return err
			}
			path := g.configPath()
			cfg, err := cliconfig.Load(path)
			if err != nil {
				return err
			}
			if name == "" {
				name = cliconfig.NameFor(server)
			}
			cx := cliconfig.Context{Name: name, Server: server, Token: token, CA: ca, Project: g.project}
			if cx.Project == "" {
				if old, ok := cfg.Get(name); ok && old.Server == server {
					cx.Project = old.Project
				}
			}
			var names []string
			for _, p := range projects {
				if p.Name != "*" {
					names = append(names, p.Name+" ("+string(p.Role)+")")
				}
			}
			sort.Strings(names)
			if cx.Project == "" && len(projects) == 1 && projects[0].Name != "*" {
				cx.Project = projects[0].Name
			}
			cfg.Put(cx)
			cfg.CurrentContext = name
			if err := cfg.Save(path); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "Logged in to %s as context %q (saved in %s).\n", server, name, path)
			for _, p := range projects {
				if p.Name == "*" {
					fmt.Fprintf(w, "Role: %s in every project.\n", p.Role)
				}
			}
			if len(names) > 0 {
				fmt.Fprintf(w, "Projects: %s\n", strings.Join(names, ", "))
			}
			if cx.Project != "" {
				fmt.Fprintf(w, "Default project: %s\n", cx.Project)
			} else if len(names) > 1 {
				fmt.Fprintln(w, "Choose a default project with `gpufleet config set-project NAME`.")
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&name, "name", "", "the context's name (default: the server's host:port)")
	fl.BoolVar(&tokenStdin, "token-stdin", false, "read the token from standard input instead of prompting")
	fl.StringVar(&ca, "certificate-authority", "", "PEM file that pins the server's certificate (https with a private CA or self-signed certificate)")
	return cmd
}

// readToken reads a token from stdin: all of it with --token-stdin, else a
// line typed without echo at a terminal.
func readToken(cmd *cobra.Command, fromStdin bool) (string, error) {
	in := cmd.InOrStdin()
	if fromStdin {
		data, err := io.ReadAll(io.LimitReader(in, 64<<10))
		if err != nil {
			return "", fmt.Errorf("reading the token from standard input: %w", err)
		}
		tok := strings.TrimSpace(string(data))
		if tok == "" {
			return "", usageError{errors.New("--token-stdin: standard input was empty; pipe the token in, e.g. echo \"$TOKEN\" | gpufleet login SERVER --token-stdin")}
		}
		return tok, nil
	}
	f, ok := in.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return "", usageError{errors.New("standard input is not a terminal: pass the token with --token-stdin")}
	}
	fmt.Fprint(cmd.ErrOrStderr(), "Token: ")
	data, err := term.ReadPassword(int(f.Fd()))
	fmt.Fprintln(cmd.ErrOrStderr())
	if err != nil {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", usageError{errors.New("no token given")}
	}
	return tok, nil
}

func newLogoutCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "logout [CONTEXT]",
		Short: "Forget a context's token (the current context's by default)",
		Example: `  gpufleet logout
  gpufleet logout prod`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := g.configPath()
			cfg, err := cliconfig.Load(path)
			if err != nil {
				return err
			}
			name := cmpOr(g.contextName, cfg.CurrentContext)
			if len(args) == 1 {
				name = args[0]
			}
			cx, err := cfg.Current(name)
			if err != nil {
				return err
			}
			if cx == nil {
				return errors.New("no current context: there is nothing to log out of (see `gpufleet config get-contexts`)")
			}
			cx.Token = ""
			if err := cfg.Save(path); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Forgot the token of context %q; log in again with `gpufleet login %s --name %s`.\n", cx.Name, cx.Server, cx.Name)
			return nil
		},
	}
}

// contextView is a context as `config` commands show it: never the token.
type contextView struct {
	Name     string `json:"name"`
	Current  bool   `json:"current"`
	Server   string `json:"server"`
	Project  string `json:"project,omitempty"`
	HasToken bool   `json:"hasToken"`
	CA       string `json:"certificateAuthority,omitempty"`
}

func newConfigCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Manage CLI contexts: servers, tokens and default projects",
		Example: `  gpufleet config get-contexts
  gpufleet config use-context prod
  gpufleet config set-project vision`,
	}
	load := func() (*cliconfig.Config, string, error) {
		path := g.configPath()
		cfg, err := cliconfig.Load(path)
		return cfg, path, err
	}
	var out string
	list := &cobra.Command{
		Use:     "get-contexts",
		Aliases: []string{"contexts"},
		Short:   "List contexts; * marks the current one",
		Example: `  gpufleet config get-contexts
  gpufleet config get-contexts -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return usageError{err}
			}
			cfg, _, err := load()
			if err != nil {
				return err
			}
			var views []contextView
			for _, x := range cfg.Contexts {
				views = append(views, contextView{Name: x.Name, Current: x.Name == cfg.CurrentContext, Server: x.Server, Project: x.Project, HasToken: x.Token != "", CA: x.CA})
			}
			return render(cmd.OutOrStdout(), out, items(views), func(tw *tabwriter.Writer) {
				row(tw, "CURRENT", "NAME", "SERVER", "PROJECT", "TOKEN")
				for _, x := range views {
					cur, tok := "", "none"
					if x.Current {
						cur = "*"
					}
					if x.HasToken {
						tok = "saved"
					}
					row(tw, cur, x.Name, x.Server, cmpOr(x.Project, "-"), tok)
				}
			})
		},
	}
	outputFlag(list, &out)
	current := &cobra.Command{
		Use:     "current-context",
		Short:   "Print the current context's name",
		Example: `  gpufleet config current-context`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := load()
			if err != nil {
				return err
			}
			if cfg.CurrentContext == "" {
				return errors.New("no current context: log in with `gpufleet login SERVER`")
			}
			fmt.Fprintln(cmd.OutOrStdout(), cfg.CurrentContext)
			return nil
		},
	}
	use := &cobra.Command{
		Use:     "use-context NAME",
		Short:   "Make a context the current one",
		Example: `  gpufleet config use-context prod`,
		Args:    cobra.ExactArgs(1),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			cfg, _, err := load()
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []string
			for _, x := range cfg.Contexts {
				names = append(names, x.Name)
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, path, err := load()
			if err != nil {
				return err
			}
			if _, ok := cfg.Get(args[0]); !ok {
				return notFoundError{fmt.Errorf("no context is named %q (list them with `gpufleet config get-contexts`)", args[0])}
			}
			cfg.CurrentContext = args[0]
			if err := cfg.Save(path); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Switched to context %q.\n", args[0])
			return nil
		},
	}
	setProject := &cobra.Command{
		Use:   "set-project PROJECT",
		Short: "Set the default project of the current context (or of --context)",
		Example: `  gpufleet config set-project vision
  gpufleet config set-project default --context prod`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, path, err := load()
			if err != nil {
				return err
			}
			cx, err := cfg.Current(g.contextName)
			if err != nil {
				return notFoundError{err}
			}
			if cx == nil {
				return errors.New("no current context: log in with `gpufleet login SERVER` first")
			}
			cx.Project = args[0]
			if err := cfg.Save(path); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Context %q now defaults to project %q.\n", cx.Name, args[0])
			return nil
		},
	}
	del := &cobra.Command{
		Use:     "delete-context NAME",
		Short:   "Remove a context and its token",
		Example: `  gpufleet config delete-context staging`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, path, err := load()
			if err != nil {
				return err
			}
			if !cfg.Delete(args[0]) {
				return notFoundError{fmt.Errorf("no context is named %q (list them with `gpufleet config get-contexts`)", args[0])}
			}
			if err := cfg.Save(path); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Deleted context %q.\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(list, current, use, setProject, del)
	return cmd
}
