package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// runnable returns every command of the tree an operator runs (not the
// groups, not cobra's own help and completion).
func runnable(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, s := range c.Commands() {
		if !s.IsAvailableCommand() || s.Name() == "help" || s.Name() == "completion" {
			continue
		}
		if s.HasSubCommands() {
			out = append(out, runnable(s)...)
			continue
		}
		out = append(out, s)
	}
	return out
}

// docSection returns the text of docs/cli.md under "## NAME", up to the
// next section of the same level.
func docSection(doc, name string) (string, bool) {
	i := strings.Index(doc, "\n## "+name+"\n")
	if i < 0 {
		return "", false
	}
	rest := doc[i+len(name)+5:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest, true
}

// TestCLIDocsInSync keeps docs/cli.md true to the command tree: every
// command has its section, every flag is named in it, and every
// command's --help has an example.
func TestCLIDocsInSync(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	cmds := runnable(newRoot())
	if len(cmds) < 30 {
		t.Fatalf("only %d commands found", len(cmds))
	}
	for _, c := range cmds {
		name := strings.TrimPrefix(c.CommandPath(), "strata ")
		sec, ok := docSection(doc, name)
		if !ok && c.HasParent() && c.Parent().Name() != "strata" {
			// A group documented in one section (config).
			sec, ok = docSection(doc, c.Parent().Name())
		}
		if !ok {
			t.Errorf("docs/cli.md has no section \"## %s\"", name)
			continue
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Name == "help" {
				return
			}
			if !strings.Contains(sec, "--"+f.Name) {
				t.Errorf("docs/cli.md, %s: flag --%s is not documented", name, f.Name)
			}
		})
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s --help has no example", name)
		}
	}
}

// TestManPagesInSync regenerates the man pages and compares them with
// docs/man: make man must have been run after the last change to a
// command's help.
func TestManPagesInSync(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	dir := t.TempDir()
	root := newRoot()
	root.SetArgs([]string{"gen-man", dir})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadDir("../../docs/man")
	if err != nil {
		t.Fatalf("docs/man: %v (run make man)", err)
	}
	if len(have) != len(want) {
		t.Errorf("docs/man has %d pages, the command tree makes %d (run make man)", len(have), len(want))
	}
	for _, e := range want {
		got, _ := os.ReadFile(dir + "/" + e.Name())
		committed, err := os.ReadFile("../../docs/man/" + e.Name())
		if err != nil || string(got) != string(committed) {
			t.Errorf("docs/man/%s is not what the command tree makes (run make man)", e.Name())
		}
	}
}
