package catalog

import (
	"debug/elf"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// maxIncludeDepth bounds nested "include" lines of ld.so.conf.
const maxIncludeDepth = 8

// stdLibDirs are the loader's default directories for an object of machine
// m, searched after DT_RPATH, DT_RUNPATH and the ld.so.conf directories.
func stdLibDirs(m elf.Machine) []string {
	triplet := "x86_64-linux-gnu"
	switch m {
	case elf.EM_AARCH64:
		triplet = "aarch64-linux-gnu"
	case elf.EM_386:
		triplet = "i386-linux-gnu"
	case elf.EM_ARM:
		triplet = "arm-linux-gnueabihf"
	case elf.EM_RISCV:
		triplet = "riscv64-linux-gnu"
	}
	return []string{"lib/" + triplet, "usr/lib/" + triplet, "lib64", "usr/lib64", "lib", "usr/lib"}
}

// ldConf returns the directories listed in etc/ld.so.conf (following its
// include lines) and in etc/ld.so.conf.d/*.conf, tree-relative, in order,
// without duplicates. It reads them once per builder.
func (b *builder) ldConf() ([]string, error) {
	if b.ldRead {
		return b.ldDirs, nil
	}
	var dirs []string
	seen := map[string]bool{}
	if err := b.readLdConf("etc/ld.so.conf", &dirs, seen, 0); err != nil {
		return nil, err
	}
	confs, err := globTree(b.fsys, "etc/ld.so.conf.d/*.conf")
	if err != nil {
		return nil, err
	}
	for _, c := range confs {
		if err := b.readLdConf(c, &dirs, seen, 0); err != nil {
			return nil, err
		}
	}
	b.ldDirs, b.ldRead = dedupe(dirs), true
	return b.ldDirs, nil
}

// readLdConf appends the directories of configuration file p to dirs.
// Files already read (seen, by resolved path) are skipped.
func (b *builder) readLdConf(p string, dirs *[]string, seen map[string]bool, depth int) error {
	final, _, ok, err := resolveFile(b.fsys, p)
	if err != nil {
		return fmt.Errorf("reading loader configuration %s: %w", p, err)
	}
	if !ok || seen[final] {
		return nil
	}
	seen[final] = true
	data, err := fs.ReadFile(b.fsys, final)
	if err != nil {
		return fmt.Errorf("reading loader configuration %s: %w", final, err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		line, _, _ = strings.Cut(line, "#")
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0, fields[0] == "hwcap":
		case fields[0] == "include":
			if depth >= maxIncludeDepth {
				continue
			}
			for _, pat := range fields[1:] {
				if !strings.HasPrefix(pat, "/") {
					pat = path.Join("/", path.Dir(p), pat)
				}
				matches, err := globTree(b.fsys, treePath(pat))
				if err != nil {
					return err
				}
				for _, m := range matches {
					if err := b.readLdConf(m, dirs, seen, depth+1); err != nil {
						return err
					}
				}
			}
		default:
			for _, d := range strings.FieldsFunc(line, func(r rune) bool { return strings.ContainsRune(" \t:,", r) }) {
				d, _, _ = strings.Cut(d, "=") // old "dir=libc5" syntax
				if strings.HasPrefix(d, "/") {
					*dirs = append(*dirs, treePath(d))
				}
			}
		}
	}
	return nil
}

// globTree expands a pattern whose last element may hold wildcards, inside
// the tree. A missing directory or a bad pattern matches nothing.
func globTree(fsys fs.FS, pattern string) ([]string, error) {
	dir, base := path.Split(pattern)
	real, ok, err := resolveDir(fsys, strings.TrimSuffix(dir, "/"))
	if err != nil {
		return nil, fmt.Errorf("expanding %s: %w", pattern, err)
	}
	if !ok {
		return nil, nil
	}
	ents, err := fs.ReadDir(fsys, fsName(real))
	if err != nil {
		return nil, fmt.Errorf("expanding %s: %w", pattern, err)
	}
	var out []string
	for _, e := range ents {
		if m, _ := path.Match(base, e.Name()); m {
			out = append(out, path.Join(real, e.Name()))
		}
	}
	return out, nil
}

// searchDirs returns the directories the loader searches for a DT_NEEDED
// name of loader object obj (info li) in an executable of machine m.
func searchDirs(obj string, li *elfInfo, conf []string, m elf.Machine) []string {
	var dirs []string
	if len(li.runpath) == 0 {
		dirs = appendLoaderDirs(dirs, li.rpath, obj)
	}
	dirs = appendLoaderDirs(dirs, li.runpath, obj)
	dirs = append(dirs, conf...)
	return dedupe(append(dirs, stdLibDirs(m)...))
}

// appendLoaderDirs appends DT_RPATH or DT_RUNPATH entries with $ORIGIN
// expanded to obj's directory. Relative entries (relative to the process's
// working directory) and other dynamic string tokens are skipped.
func appendLoaderDirs(dirs, entries []string, obj string) []string {
	origin := path.Join("/", path.Dir(obj))
	for _, d := range entries {
		d = strings.ReplaceAll(d, "${ORIGIN}", origin)
		d = strings.ReplaceAll(d, "$ORIGIN", origin)
		if strings.HasPrefix(d, "/") && !strings.Contains(d, "$") {
			dirs = append(dirs, treePath(d))
		}
	}
	return dirs
}

// dedupe drops repeated strings, keeping the first of each.
func dedupe(list []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
