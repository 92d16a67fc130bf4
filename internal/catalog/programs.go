package catalog

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// commandDirs are where systemd looks up an Exec command given by name.
var commandDirs = []string{"usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin"}

// maxInterpDepth bounds chains of scripts whose interpreter is a script.
const maxInterpDepth = 4

// builder holds the file system being cataloged and what it has learned
// about its files.
type builder struct {
	fsys   fs.FS
	infos  map[string]*fileInfo // by symlink-free path
	libs   map[string][]string  // library closure by ELF object path
	ldDirs []string
	ldRead bool
}

func newBuilder(fsys fs.FS) *builder {
	return &builder{fsys: fsys, infos: map[string]*fileInfo{}, libs: map[string][]string{}}
}

// info inspects the regular, symlink-free file p once.
func (b *builder) info(p string) (*fileInfo, error) {
	if fi, ok := b.infos[p]; ok {
		return fi, nil
	}
	fi, err := inspectFile(b.fsys, p)
	if err != nil {
		return nil, err
	}
	b.infos[p] = fi
	return fi, nil
}

// addCommand records the program of an Exec line or an env(1) argument:
// an absolute path, or a name looked up in commandDirs. A name found
// nowhere is skipped.
func (b *builder) addCommand(cmd string, bins, libs pathSet, depth int) error {
	if strings.HasPrefix(cmd, "/") {
		return b.addProgram(treePath(cmd), bins, libs, depth)
	}
	if cmd == "" || strings.Contains(cmd, "/") {
		return nil
	}
	for _, d := range commandDirs {
		p := d + "/" + cmd
		_, _, ok, err := resolveFile(b.fsys, p)
		if err != nil {
			return fmt.Errorf("looking up command %s: %w", cmd, err)
		}
		if ok {
			return b.addProgram(p, bins, libs, depth)
		}
	}
	return nil
}

// addProgram records program p, the links it passes, its target, the
// libraries of an ELF target and, for a script, its interpreter
// (recursively). A program missing from the tree is recorded by name only.
func (b *builder) addProgram(p string, bins, libs pathSet, depth int) error {
	bins.add(p)
	final, links, ok, err := resolveFile(b.fsys, p)
	bins.add(links...)
	if err != nil {
		return fmt.Errorf("resolving program %s: %w", p, err)
	}
	if !ok {
		return nil
	}
	bins.add(final)
	fi, err := b.info(final)
	if err != nil {
		return err
	}
	switch fi.kind {
	case kindELF:
		l, err := b.libraries(final, fi.elf)
		if err != nil {
			return err
		}
		libs.add(l...)
	case kindScript:
		if depth >= maxInterpDepth || len(fi.shebang) == 0 || !strings.HasPrefix(fi.shebang[0], "/") {
			return nil
		}
		if err := b.addProgram(treePath(fi.shebang[0]), bins, libs, depth+1); err != nil {
			return err
		}
		if path.Base(fi.shebang[0]) == "env" {
			return b.addCommand(envCommand(fi.shebang[1:]), bins, libs, depth+1)
		}
	}
	return nil
}

// envCommand returns the command of an env(1) argument list: the first
// word that is neither an option nor a variable assignment.
func envCommand(args []string) string {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") && !strings.Contains(a, "=") {
			return a
		}
	}
	return ""
}

// pathSet collects tree paths.
type pathSet map[string]struct{}

func (s pathSet) add(ps ...string) {
	for _, p := range ps {
		if p != "" {
			s[p] = struct{}{}
		}
	}
}

// sorted returns the paths of s in order, or nil when s is empty.
func (s pathSet) sorted() []string {
	if len(s) == 0 {
		return nil
	}
	out := make([]string, 0, len(s))
	for p := range s {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
