package main

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api/client"
)

// Exit codes, documented in docs/cli.md; scripts branch on them.
const (
	exitFailure     = 1 // anything else
	exitUsage       = 2 // bad flags, arguments or subcommand
	exitNotFound    = 3 // the job, node, queue… does not exist
	exitForbidden   = 4 // the token is refused or may not do this
	exitConflict    = 5 // the object's state forbids it (already ended, exists…)
	exitUnreachable = 6 // no answer from the server
)

// usageError is a mistake in how the command was called.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// notFoundError is a local lookup that found nothing (a context, a file).
type notFoundError struct{ err error }

func (e notFoundError) Error() string { return e.err.Error() }
func (e notFoundError) Unwrap() error { return e.err }

// classify maps an error to its exit code and the message to print.
func classify(err error) (int, string) {
	var ue usageError
	var nf notFoundError
	var unreachable *client.UnreachableError
	switch {
	case errors.As(err, &ue):
		return exitUsage, err.Error()
	case strings.HasPrefix(err.Error(), "unknown command"), strings.HasPrefix(err.Error(), "unknown flag"),
		strings.HasPrefix(err.Error(), "unknown shorthand flag"):
		// cobra's own, from the root command's argument check.
		return exitUsage, err.Error()
	case errors.As(err, &nf):
		return exitNotFound, err.Error()
	case errors.As(err, &unreachable):
		return exitUnreachable, err.Error()
	}
	switch client.StatusOf(err) {
	case http.StatusUnauthorized:
		return exitForbidden, err.Error() + "\nYour token was not accepted: it may be revoked or expired. Log in again with `gpufleet login SERVER`, or ask an admin for a new one (`gpufleet tokens create`)."
	case http.StatusForbidden:
		return exitForbidden, err.Error()
	case http.StatusNotFound:
		return exitNotFound, err.Error()
	case http.StatusConflict:
		return exitConflict, err.Error()
	}
	return exitFailure, err.Error()
}

// strictGroups makes every command that only groups others (jobs, nodes…)
// refuse an unknown subcommand with "did you mean" and exit 2, where cobra
// would print the help and exit 0; every command's argument errors become
// usage errors.
func strictGroups(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil && c != root {
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(c *cobra.Command, args []string) error {
				if len(args) == 0 {
					return c.Help()
				}
				msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
				if c.SuggestionsMinimumDistance <= 0 {
					c.SuggestionsMinimumDistance = 2
				}
				if s := c.SuggestionsFor(args[0]); len(s) > 0 {
					msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
				}
				return usageError{fmt.Errorf("%s\nRun '%s --help' for its commands.", msg, c.CommandPath())}
			}
		} else if c.Args != nil {
			check := c.Args
			c.Args = func(c *cobra.Command, args []string) error {
				if err := check(c, args); err != nil {
					return usageError{fmt.Errorf("%w\nSee '%s --help'.", err, c.CommandPath())}
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
