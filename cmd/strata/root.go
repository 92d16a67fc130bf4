package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/strata-dev/strata/internal/suggest"
)

type globals struct {
	json bool
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "strata",
		Short: "Read-only root images, signed overlays in sequence, audited nodes",
		Long: `strata builds read-only root images (squashfs) from recipes, ships minor
changes as versioned, signed overlays that record which services they touch,
applies them to nodes strictly in order, restarts only the affected services,
audits that no overlay was skipped or altered, and regenerates images with the
overlay chain folded in.

` + exitHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().BoolVar(&g.json, "json", false, "print structured output as JSON")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{flagSuggestion(c, err)} })
	root.AddCommand(
		newKeyCmd(g),
		newBuildImageCmd(g),
		newRepoCmd(g),
		newOverlayCmd(g),
		newProvisionCmd(g),
		newApplyCmd(g),
		newActivateCmd(g),
		newUpgradeCmd(g),
		newStatusCmd(g),
		newHealthCmd(g),
		newRolloutCmd(g),
		newRestartCmd(g),
		newRollbackCmd(g),
		newRestartPendingCmd(g),
		newGCCmd(g),
		newVerifyCmd(g),
		newRegenerateCmd(g),
		newServeCmd(g),
		newAgentCmd(g),
		newNudgeCmd(g),
		newHoldCmd(g),
		newReleaseCmd(g),
		newBundleCmd(g),
		newConfigCmd(g),
		newVersionCmd(g),
		newNodeCmd(g),
		newImageCmd(g),
		newBootCmd(g),
		newSecureBootCmd(g),
	)
	for _, c := range root.Commands() {
		guardGroup(c)
	}
	root.AddCommand(newGenManCmd(root))
	return root
}

// guardGroup makes a command group (config, key, overlay, repo) refuse
// an unknown subcommand as a usage error; without one it shows its help.
func guardGroup(c *cobra.Command) {
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.DisableFlagsInUseLine = true
	// The mistyped subcommand's flags are not the group's: parse nothing,
	// so the message is about the subcommand.
	c.DisableFlagParsing = true
	c.SuggestionsMinimumDistance = 2
	c.RunE = func(c *cobra.Command, a []string) error {
		var words []string
		for _, w := range a {
			switch {
			case w == "-h" || w == "--help":
				return c.Help()
			case w == "--json" || w == "--json=true":
			case strings.HasPrefix(w, "-"):
				if len(words) == 0 {
					return usageError{fmt.Errorf("unknown flag %s for %q: give a command first (%s --help lists them)", w, c.CommandPath(), c.CommandPath())}
				}
			default:
				words = append(words, w)
			}
		}
		if len(words) == 0 {
			return c.Help()
		}
		a = words
		var names []string
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() {
				names = append(names, s.Name())
			}
		}
		msg := fmt.Sprintf("unknown command %q for %q (commands: %s)", a[0], c.CommandPath(), strings.Join(names, ", "))
		if sug := c.SuggestionsFor(a[0]); len(sug) > 0 {
			msg += "; did you mean " + sug[0] + "?"
		}
		return usageError{errors.New(msg)}
	}
	for _, s := range c.Commands() {
		guardGroup(s)
	}
}

// args wraps a cobra positional-argument check as a usage error.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(c *cobra.Command, a []string) error {
		if err := check(c, a); err != nil {
			msg := err.Error()
			for _, r := range argCounts {
				msg = r.re.ReplaceAllString(msg, r.with)
			}
			return usageError{fmt.Errorf("%s: %s; usage: %s", strings.TrimPrefix(c.CommandPath(), "strata "), msg, c.UseLine())}
		}
		return nil
	}
}

// argCounts reword cobra's messages for a wrong number of arguments.
var argCounts = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`accepts (\d+) arg\(s\), received (\d+)`), "takes $1 argument(s), got $2"},
	{regexp.MustCompile(`requires at least (\d+) arg\(s\), only received (\d+)`), "takes at least $1 argument(s), got $2"},
	{regexp.MustCompile(`accepts at most (\d+) arg\(s\), received (\d+)`), "takes at most $1 argument(s), got $2"},
	{regexp.MustCompile(`accepts between (\d+) and (\d+) arg\(s\), received (\d+)`), "takes $1 to $2 arguments, got $3"},
	{regexp.MustCompile(`unknown command ("[^"]*") for "[^"]*"`), "takes no arguments, got $1"},
}

// rootUnknown is cobra's message for an unknown top-level command.
var rootUnknown = regexp.MustCompile(`^unknown command "([^"]*)" for "strata"`)

// plainUnknownCommand words cobra's unknown top-level command as the
// groups word theirs: one line, with the closest command.
func plainUnknownCommand(root *cobra.Command, err error) error {
	m := rootUnknown.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	msg := fmt.Sprintf("unknown command %q for \"strata\"", m[1])
	if sug := root.SuggestionsFor(m[1]); len(sug) > 0 {
		msg += "; did you mean " + sug[0] + "?"
	}
	return usageError{errors.New(msg + " (strata --help lists the commands)")}
}

// output prints v as JSON with --json, or calls text otherwise.
func (g *globals) output(w io.Writer, v any, text func(w io.Writer)) error {
	if stderrReporter != nil {
		stderrReporter.finish() // no status line under the result
	}
	if g.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false) // "->" stays "->"
		return enc.Encode(v)
	}
	text(w)
	return nil
}

// progress returns a progress callback printing to stderr (see reporter),
// silent with --json.
func (g *globals) progress() func(string) {
	if g.json {
		return nil
	}
	return g.reporter().line
}

// fraction returns a progress-bar callback: a bar on a terminal, nothing
// elsewhere or with --json.
func (g *globals) fraction() func(string, int64, int64) {
	if g.json {
		return nil
	}
	return g.reporter().fraction
}

func (g *globals) reporter() *reporter {
	if stderrReporter == nil {
		stderrReporter = newReporter(os.Stderr)
	}
	return stderrReporter
}

// stderrReporter is the command's progress display, once one is needed;
// main clears its status line before the command's last words.
var stderrReporter *reporter

func required(c *cobra.Command, names ...string) {
	for _, n := range names {
		_ = c.MarkFlagRequired(n)
	}
}

// flagSuggestion adds to an unknown-flag error the command's flags
// closest to the one given: "unknown flag: --reposit (did you mean
// --repo?)".
func flagSuggestion(c *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return err
	}
	name, _, _ = strings.Cut(name, "=")
	var names []string
	c.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	c.InheritedFlags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	near := suggest.Nearest(name, names, max(2, len(name)/2), 3)
	if len(near) == 0 {
		return fmt.Errorf("%w (%s --help lists its flags)", err, c.CommandPath())
	}
	for i := range near {
		near[i] = "--" + near[i]
	}
	return fmt.Errorf("%w (did you mean %s?)", err, strings.Join(near, " or "))
}
