package builder

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Volatile files: what a package manager or first boot writes that differs
// from run to run or names the build host. cleanRootfs applies these rules
// to a bootstrapped tree and to the tree after run steps, before either is
// cached (docs/images.md lists them).
var (
	// emptiedDirs lose their contents; the directories stay.
	emptiedDirs = append(append([]string{}, pseudoDirs...), "var/tmp")
	// truncatedBelow: regular files below these become empty, keeping
	// owner and mode, so services that expect their log file still find
	// it.
	truncatedBelow = []string{"var/log"}
	// removedBelow: regular files below these are removed (directories
	// stay).
	removedBelow = []string{"var/cache/apt", "var/lib/apt/lists"}
	// removedFiles are removed when they are regular files; a trailing
	// "*" matches any suffix of the last element.
	removedFiles = []string{
		"var/cache/ldconfig/aux-cache",
		"var/lib/systemd/random-seed",
		"var/lib/dbus/machine-id",
		"etc/ssh/ssh_host_*",
	}
	// truncatedFiles become empty when they are regular files: an empty
	// machine-id makes systemd generate one on first boot.
	truncatedFiles = []string{"etc/machine-id"}
	// hostFiles are copied from the build host by debootstrap; in a
	// bootstrapped tree they become empty, 0644 and owned by root.
	hostFiles = []string{"etc/resolv.conf", "etc/hostname"}
)

// cleanRootfs applies the volatile-file rules to the root tree at root;
// bootstrapped also empties the files debootstrap copies from the host.
// Nothing is followed through a symlink: a rule whose directory is a
// symlink in the tree does nothing.
func cleanRootfs(root string, bootstrapped bool) error {
	for _, d := range emptiedDirs {
		if err := emptyDir(root, d); err != nil {
			return err
		}
	}
	for _, d := range truncatedBelow {
		if err := eachBelow(root, d, regular(truncate)); err != nil {
			return err
		}
	}
	for _, d := range removedBelow {
		if err := eachBelow(root, d, regular(os.Remove)); err != nil {
			return err
		}
	}
	files := map[string]func(string) error{}
	for _, p := range removedFiles {
		files[p] = os.Remove
	}
	for _, p := range truncatedFiles {
		files[p] = truncate
	}
	if bootstrapped {
		for _, p := range hostFiles {
			files[p] = emptyRootFile
		}
	}
	for pat, op := range files {
		if err := eachMatch(root, pat, op); err != nil {
			return err
		}
	}
	return nil
}

// realDir reports whether rel is a directory below root reached without
// passing through a symlink.
func realDir(root, rel string) bool {
	p := root
	for _, el := range strings.Split(rel, "/") {
		p = filepath.Join(p, el)
		fi, err := os.Lstat(p)
		if err != nil || !fi.IsDir() {
			return false
		}
	}
	return true
}

// emptyDir removes everything in root/rel when rel is a real directory.
func emptyDir(root, rel string) error {
	if !realDir(root, rel) {
		return nil
	}
	dir := filepath.Join(root, rel)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("cleaning %s: %w", dir, err)
	}
	for _, e := range ents {
		if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// eachBelow calls fn for everything below root/rel, without following
// symlinks, when rel is a real directory.
func eachBelow(root, rel string, fn func(p string, d fs.DirEntry) error) error {
	if !realDir(root, rel) {
		return nil
	}
	dir := filepath.Join(root, rel)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		return fn(p, d)
	})
	if err != nil {
		return fmt.Errorf("cleaning %s: %w", dir, err)
	}
	return nil
}

// regular adapts op to eachBelow, applying it to regular files only.
func regular(op func(string) error) func(string, fs.DirEntry) error {
	return func(p string, d fs.DirEntry) error {
		if d.Type().IsRegular() {
			return op(p)
		}
		return nil
	}
}

// eachMatch applies op to the regular files matching pat ("dir/name" or
// "dir/prefix*") whose directory is a real directory of root.
func eachMatch(root, pat string, op func(string) error) error {
	dir, name := filepath.Split(pat)
	dir = strings.TrimSuffix(dir, "/")
	if !realDir(root, dir) {
		return nil
	}
	ents, err := os.ReadDir(filepath.Join(root, dir))
	if err != nil {
		return fmt.Errorf("cleaning %s: %w", dir, err)
	}
	prefix, glob := strings.CutSuffix(name, "*")
	for _, e := range ents {
		if !e.Type().IsRegular() || e.Name() != name && !(glob && strings.HasPrefix(e.Name(), prefix)) {
			continue
		}
		if err := op(filepath.Join(root, dir, e.Name())); err != nil {
			return fmt.Errorf("cleaning %s: %w", filepath.Join(dir, e.Name()), err)
		}
	}
	return nil
}

func truncate(p string) error { return os.Truncate(p, 0) }

// emptyRootFile makes p an empty file, 0644, owned by root.
func emptyRootFile(p string) error {
	if err := os.Truncate(p, 0); err != nil {
		return err
	}
	if err := os.Lchown(p, 0, 0); err != nil {
		return err
	}
	return os.Chmod(p, 0o644)
}
