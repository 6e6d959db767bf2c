package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command a user can reach shows examples in its --help.
func TestEveryCommandHasExamples(t *testing.T) {
	var missing []string
	root := newRoot()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" && c.Parent() == root {
			return // cobra's own, with its own long help
		}
		if strings.TrimSpace(c.Example) == "" {
			missing = append(missing, c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root.InitDefaultCompletionCmd()
	walk(root)
	if len(missing) > 0 {
		t.Errorf("%d commands have no Example in --help:\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
}

// A mistyped subcommand is a usage error that suggests the right one.
func TestUnknownSubcommandSuggests(t *testing.T) {
	root := newRoot()
	root.SetArgs([]string{"jobs", "lst"})
	err := root.Execute()
	if err == nil {
		t.Fatal("`gpufleet jobs lst` succeeded")
	}
	code, msg := classify(err)
	if code != exitUsage || !strings.Contains(msg, "Did you mean this?") || !strings.Contains(msg, "list") {
		t.Errorf("got exit %d, %q; want %d suggesting list", code, msg, exitUsage)
	}
}
