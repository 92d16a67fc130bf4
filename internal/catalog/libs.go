package catalog

import (
	"fmt"
	"strings"
)

// libraries returns the shared objects ELF object obj (info oi) loads:
// its PT_INTERP interpreter and its DT_NEEDED libraries, transitively,
// each as the path found in a search directory plus, when that is a
// symlink, the links passed and the final target. Libraries not in the
// tree, or of another class or machine than obj, are skipped. The result
// is cached per object.
func (b *builder) libraries(obj string, oi *elfInfo) ([]string, error) {
	if l, ok := b.libs[obj]; ok {
		return l, nil
	}
	conf, err := b.ldConf()
	if err != nil {
		return nil, err
	}
	type item struct {
		path string
		info *elfInfo
	}
	var out []string
	seen := map[string]bool{obj: true}
	queue := []item{{obj, oi}}
	enqueue := func(final string) error {
		if final == "" || seen[final] {
			return nil
		}
		seen[final] = true
		fi, err := b.info(final)
		if err != nil {
			return err
		}
		if fi.kind == kindELF {
			queue = append(queue, item{final, fi.elf})
		}
		return nil
	}
	if oi.interp != "" {
		p := treePath(oi.interp)
		final, links, ok, err := resolveFile(b.fsys, p)
		if err != nil {
			return nil, fmt.Errorf("resolving interpreter %s of %s: %w", p, obj, err)
		}
		out = append(append(out, p), links...)
		if ok {
			out = append(out, final)
			if err := enqueue(final); err != nil {
				return nil, err
			}
		}
	}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		for _, name := range it.info.needed {
			found, final, err := b.findLib(name, it.path, it.info, oi, conf)
			if err != nil {
				return nil, err
			}
			out = append(out, found...)
			if err := enqueue(final); err != nil {
				return nil, err
			}
		}
	}
	b.libs[obj] = out
	return out, nil
}

// findLib looks DT_NEEDED name of loader object obj (info li) up in the
// tree for executable info exe. It returns the paths to record and the
// final symlink-free path, or nothing when the library is not found.
func (b *builder) findLib(name, obj string, li, exe *elfInfo, conf []string) (found []string, final string, err error) {
	var cands []string
	switch {
	case strings.HasPrefix(name, "/"):
		cands = []string{treePath(name)}
	case strings.Contains(name, "/"):
		return nil, "", nil // relative to the working directory: unknowable
	default:
		for _, d := range searchDirs(obj, li, conf, exe.machine) {
			cands = append(cands, treePath(d+"/"+name))
		}
	}
	for _, c := range cands {
		final, links, ok, err := resolveFile(b.fsys, c)
		if err != nil {
			return nil, "", fmt.Errorf("resolving library %s needed by %s: %w", c, obj, err)
		}
		if !ok {
			continue
		}
		fi, err := b.info(final)
		if err != nil {
			return nil, "", err
		}
		if fi.kind != kindELF || fi.elf.class != exe.class || fi.elf.machine != exe.machine {
			continue // the loader skips incompatible objects
		}
		return append(append([]string{c}, links...), final), final, nil
	}
	return nil, "", nil
}
