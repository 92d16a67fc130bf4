package node

import (
	"context"
	"sort"

	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/configset"
	"github.com/strata-dev/strata/node/internal/view"
	"github.com/strata-dev/strata/schema"
)

// Configs lists the configuration files the node's service catalog
// claims below /etc (declared paths, reload paths and unit files; a
// declared directory stands for the files below it), each hashed as it is
// on disk, without following a symlink. It changes nothing.
func (h *Node) Configs(ctx context.Context) (*schema.Configs, error) {
	b, root := h.b, h.root
	v, err := view.Load(b.Node())
	if err != nil {
		return nil, err
	}
	state, err := v.Expected()
	if err != nil {
		return nil, err
	}
	entries := state.Entries()
	claims := map[string][]string{}
	out := &schema.Configs{Services: []string{}, Files: []schema.ConfigFile{}}
	for _, s := range v.Catalog().Services {
		out.Services = append(out.Services, s.Unit)
		var paths []string
		paths = append(paths, s.Paths...)
		paths = append(paths, s.ReloadPaths...)
		paths = append(paths, s.UnitFiles...)
		for _, p := range paths {
			if !manifests.Within(p, "etc") {
				continue
			}
			for _, e := range entries {
				if e.Type == manifests.TypeFile && manifests.Within(e.Path, p) {
					claims[e.Path] = appendOnce(claims[e.Path], s.Unit)
				}
			}
		}
	}
	for _, e := range entries {
		units, ok := claims[e.Path]
		if !ok {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f := schema.ConfigFile{Path: e.Path, Units: units, Expected: e.SHA256}
		f.SHA256, f.ModTime, err = configset.HashFile(root, e.Path)
		if err != nil {
			f.Error = err.Error()
		}
		out.Files = append(out.Files, f)
	}
	sort.Strings(out.Services)
	return out, nil
}

func appendOnce(ss []string, s string) []string {
	for _, x := range ss {
		if x == s {
			return ss
		}
	}
	return append(ss, s)
}
