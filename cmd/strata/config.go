package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/configedit"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

func newConfigCmd(g *globals) *cobra.Command {
	cc := &cobra.Command{Use: "config", Short: "Read, compare, edit and publish configuration files of a line"}
	cc.AddCommand(newConfigGetCmd(g), newConfigDiffCmd(g), newConfigSetCmd(g), newConfigEditCmd(g))
	return cc
}

func newConfigGetCmd(g *globals) *cobra.Command {
	var repoDir, line, version string
	c := &cobra.Command{
		Use:   "get --repo REPO /etc/PATH [--version V]",
		Short: "Print a file as the line has it at a version (default: the head)",
		Long: `Print the file as the line has it at --version (default: the head) on
stdout, and on stderr which overlay last wrote it: its version, the key
that signed it and when it was created (or the image, when no overlay
did). --json gives both in one document.`,
		Example: `  strata config get --repo repo /etc/nginx/nginx.conf
  strata config get --repo repo /etc/nginx/nginx.conf --version 1.0.3`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			b, at, w, err := configedit.LastChange(c.Context(), repoDir, line, a[0], version)
			if err != nil {
				return err
			}
			if g.json {
				return g.output(c.OutOrStdout(), map[string]any{"path": a[0], "version": at, "content": string(b), "last_written": w}, nil)
			}
			// Who wrote it goes to stderr: stdout is the file, as it is.
			fmt.Fprintf(c.ErrOrStderr(), "%s at %s: %s\n", a[0], at, writtenBy(w))
			_, err = c.OutOrStdout().Write(b)
			return err
		},
	}
	c.Flags().StringVar(&repoDir, "repo", "", "repository (a directory)")
	c.Flags().StringVar(&line, "line", "", "line (when the repository has several)")
	versionVar(c, &version, "version", "version to read (default: the head)")
	required(c, "repo")
	return c
}

func newConfigDiffCmd(g *globals) *cobra.Command {
	var repoDir, line string
	c := &cobra.Command{
		Use:     "diff --repo REPO V1 V2",
		Short:   "Show what changed between two versions and the services each change touches",
		Example: `  strata config diff --repo repo 1.0.2 1.0.5`,
		Args:    args(cobra.ExactArgs(2)),
		RunE: func(c *cobra.Command, a []string) error {
			for _, v := range a {
				if err := versionArg(v); err != nil {
					return err
				}
			}
			rep, err := configedit.Diff(c.Context(), repoDir, line, a[0], a[1])
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), rep, func(w io.Writer) { printConfigReport(w, rep) })
		},
	}
	c.Flags().StringVar(&repoDir, "repo", "", "repository (a directory)")
	c.Flags().StringVar(&line, "line", "", "line (when the repository has several)")
	required(c, "repo")
	return c
}

func newConfigSetCmd(g *globals) *cobra.Command {
	var o configedit.SetOptions
	var repoDir, keyPath string
	c := &cobra.Command{
		Use:   "set --repo REPO --key K /etc/PATH=FILE ...",
		Short: "Publish new contents of files as the line's next overlay, after checking them",
		Long: `Set files of the line's head to the contents of host files and publish
the result as the next overlay (version: the next patch unless --version),
signed with --key. Each file's syntax is checked for the formats strata
knows (JSON, YAML, TOML, systemd unit files), and the validation command
of every service that claims a changed file runs against the head's tree
with the change in place; nothing is published unless all pass. For CI:
it never asks.`,
		Example: `  strata config set --repo repo --key ci.key /etc/nginx/nginx.conf=nginx.conf`,
		Args:    args(cobra.MinimumNArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			var edits []configedit.Edit
			for _, arg := range a {
				dest, src, ok := strings.Cut(arg, "=")
				if !ok || !strings.HasPrefix(dest, "/") || src == "" {
					return usageError{fmt.Errorf("%q: want /IMAGE/PATH=HOSTFILE", arg)}
				}
				b, err := readHostFile(src)
				if err != nil {
					return err
				}
				edits = append(edits, configedit.Edit{Path: dest, Content: b})
			}
			key, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			o.Key, o.Progress = key, g.progress()
			plan, err := configedit.Set(c.Context(), repoDir, edits, o)
			if err != nil {
				if plan != nil && !g.json {
					printConfigReport(c.ErrOrStderr(), &plan.Report)
				}
				return err
			}
			return g.output(c.OutOrStdout(), planJSON(plan), func(w io.Writer) { printPlan(w, plan) })
		},
	}
	f := c.Flags()
	f.StringVar(&repoDir, "repo", "", "repository (a directory)")
	f.StringVar(&keyPath, "key", "", "signing key")
	f.StringVar(&o.Line, "line", "", "line (when the repository has several)")
	versionVar(c, &o.Version, "version", "version of the overlay (default: the next patch)")
	required(c, "repo", "key")
	return c
}

func newConfigEditCmd(g *globals) *cobra.Command {
	var o configedit.SetOptions
	var repoDir, keyPath string
	var yes bool
	c := &cobra.Command{
		Use:   "edit --repo REPO --key K /etc/PATH",
		Short: "Edit a file of the line's head in $EDITOR, check it and publish it",
		Long: `Open the file as it is at the line's head in $VISUAL or $EDITOR (default
vi; its words are run as a command, never through a shell), then check the
result as config set does, show the diff and the restart plan, and ask
before publishing it as the next overlay. If the head moved while the
editor was open, nothing is published; if a check fails, nothing is
published and the edited file is kept, and its path printed.`,
		Example: `  EDITOR=nano strata config edit --repo repo --key ops.key /etc/nginx/nginx.conf`,
		Args:    args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			key, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			old, head, err := configedit.Get(c.Context(), repoDir, o.Line, a[0], "")
			if errors.Is(err, configedit.ErrNoFile) {
				old, err = nil, nil // a new file
			}
			if err != nil {
				return err
			}
			dir, err := os.MkdirTemp("", "strata-edit-")
			if err != nil {
				return err
			}
			file := filepath.Join(dir, filepath.Base(a[0]))
			if err := os.WriteFile(file, old, 0o600); err != nil {
				return err
			}
			// The copy is read back beneath the directory as it was
			// before the editor ran, never through a link: an editor
			// (or anything else) that swaps the copy for a link to
			// /etc/shadow does not get the host's file published.
			d, err := os.Open(dir)
			if err != nil {
				return err
			}
			defer d.Close()
			if err := runEditor(c, file); err != nil {
				return fmt.Errorf("%w (the file is kept in %s)", err, file)
			}
			edited, err := safefile.ReadIn(d, filepath.Base(file), maxConfigFile)
			if err != nil {
				return fmt.Errorf("%w: %w (nothing published)", errEditedCopy, err)
			}
			if string(edited) == string(old) {
				os.RemoveAll(dir)
				fmt.Fprintln(c.ErrOrStderr(), "no change; nothing published")
				return nil
			}
			o.Key, o.Parent, o.Progress = key, head, g.progress()
			if !yes {
				o.Confirm = func(p *configedit.Plan) bool {
					printPlan(c.ErrOrStderr(), p)
					fmt.Fprintf(c.ErrOrStderr(), "publish %s %s? [y/N] ", p.Line, p.To)
					ans, _ := bufio.NewReader(c.InOrStdin()).ReadString('\n')
					return strings.EqualFold(strings.TrimSpace(ans), "y") || strings.EqualFold(strings.TrimSpace(ans), "yes")
				}
			}
			// Once fixed, the kept file is published as it is.
			again := fmt.Sprintf("strata config set --repo %s --key %s %s=%s", repoDir, keyPath, a[0], file)
			plan, err := configedit.Set(c.Context(), repoDir, []configedit.Edit{{Path: a[0], Content: edited}}, o)
			if err != nil {
				return fmt.Errorf("%w (nothing published; your edit is kept in %s: fix it, then %s)", err, file, again)
			}
			if plan.Published == nil {
				fmt.Fprintf(c.ErrOrStderr(), "not published; your edit is kept in %s (to publish it: %s)\n", file, again)
				return nil
			}
			os.RemoveAll(dir)
			// --yes asked nothing: the diff and the plan are printed
			// all the same, after the fact.
			return g.output(c.OutOrStdout(), planJSON(plan), func(w io.Writer) {
				if yes {
					printPlan(w, plan)
					return
				}
				fmt.Fprintf(w, "published %s %s (%s)\n", plan.Line, plan.To, plan.Published.Path)
			})
		},
	}
	f := c.Flags()
	f.StringVar(&repoDir, "repo", "", "repository (a directory)")
	f.StringVar(&keyPath, "key", "", "signing key")
	f.StringVar(&o.Line, "line", "", "line (when the repository has several)")
	versionVar(c, &o.Version, "version", "version of the overlay (default: the next patch)")
	f.BoolVar(&yes, "yes", false, "publish without asking")
	required(c, "repo", "key")
	return c
}

// runEditor runs $VISUAL or $EDITOR (default vi) on file, its words as
// argv, with the terminal's standard streams. Ctrl-C while it runs is
// the editor's own (vi cancels a command with it), not strata's.
func runEditor(c *cobra.Command, file string) error {
	ed := os.Getenv("VISUAL")
	if ed == "" {
		ed = os.Getenv("EDITOR")
	}
	if ed == "" {
		ed = "vi"
	}
	argv := append(strings.Fields(ed), file)
	cmd := exec.CommandContext(c.Context(), argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stderr, os.Stderr
	// SIGINT is the editor's while it runs (main ignores it); SIGTERM
	// ends strata, and the editor is asked to end too, not killed.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	editorRunning.Store(true)
	defer editorRunning.Store(false)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("editor %s: %w", argv[0], err)
	}
	return nil
}

func planJSON(p *configedit.Plan) map[string]any {
	out := map[string]any{"plan": p}
	if p.Published != nil {
		out["published"] = map[string]any{"path": p.Published.Path, "digest": p.Published.Digest, "version": p.To}
	}
	return out
}

func printPlan(w io.Writer, p *configedit.Plan) {
	printConfigReport(w, &p.Report)
	for _, v := range p.Validated {
		fmt.Fprintf(w, "validated %s\n", v)
	}
	if p.Published != nil {
		fmt.Fprintf(w, "published %s %s (%s)\n", p.Line, p.To, p.Published.Path)
	}
}

func printConfigReport(w io.Writer, rep *configedit.Report) {
	fmt.Fprintf(w, "line %s: %s -> %s\n", rep.Line, rep.From, orHead(rep.To))
	for _, ch := range rep.Changes {
		extra := ""
		if len(ch.What) > 0 {
			extra = " (" + strings.Join(ch.What, ", ") + ")"
		}
		units := ""
		if len(ch.Units) > 0 {
			units = " -> " + strings.Join(ch.Units, ", ")
		}
		fmt.Fprintf(w, "%-8s %s%s%s\n", ch.Kind, ch.Path, extra, units)
		if ch.Diff != "" {
			fmt.Fprint(w, indent(ch.Diff))
		}
	}
	fmt.Fprintf(w, "services (%d):\n", len(rep.Services))
	printActions(w, rep.Services)
}

func orHead(v string) string {
	if v == "" {
		return "(next)"
	}
	return v
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	return b.String()
}

// maxConfigFile bounds a configuration file config set and edit read.
const maxConfigFile = 64 << 20

// errEditedCopy refuses an edited copy that is not a regular file in
// its directory (a link, a FIFO) or is over the size bound.
var errEditedCopy = manifests.Rejection("reading the edited copy")

// readHostFile reads a host file an operator named (a symlink to one is
// fine), up to maxConfigFile bytes.
func readHostFile(path string) ([]byte, error) {
	return safefile.ReadFollow(path, maxConfigFile)
}

// writtenBy says which element of a line last wrote a file.
func writtenBy(w *configedit.Writer) string {
	if w.Image {
		return fmt.Sprintf("as the image %s has it (created %s)", w.Version, w.Created)
	}
	signer := "signed by " + w.Signer
	if !w.Verified {
		signer += " (a key the line does not trust at this version)"
	}
	return fmt.Sprintf("last written by overlay %s, %s, created %s", w.Version, signer, w.Created)
}
