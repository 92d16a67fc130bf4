package overlayfs

import (
	"context"
	"fmt"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/sandbox"
	"github.com/strata-dev/strata/manifests"
)

// RunStaged runs argv (a service's validation command) against a staged,
// not yet switched apply: in a private mount namespace whose stacks
// already hold the new layer at the real paths, in a sandbox (package
// internal/sandbox: unprivileged, no network, a copy-on-write view of the
// node's root), so the command reads the new configuration while the
// node and its services go on seeing the old one. Only an active node can
// do this. The output (at most 64 KiB) is returned.
func (b *Backend) RunStaged(ctx context.Context, nt nodestate.Txn, argv []string) (string, error) {
	t, ok := nt.(*txn)
	if !ok || t.b != b || t.j.Kind != "apply" || t.switched {
		return "", fmt.Errorf("running %s: not a staged apply of this node", argv[0])
	}
	if err := manifests.ValidCommand(argv); err != nil {
		return "", err
	}
	live, err := b.Live()
	if err != nil {
		return "", err
	}
	if !live {
		return "", fmt.Errorf("running %s against layer %s: the node's stacks are not active (run strata activate)", argv[0], t.j.Record.Version)
	}
	layers, err := t.layers(false)
	if err != nil {
		return "", err
	}
	layers = append(layers, layerRef{Version: t.j.Record.Version, Image: t.j.Record.Layer, staged: true})
	return sandbox.Private(func() (string, error) { return b.runPrivate(ctx, layers, argv) })
}

// runPrivate runs in a private mount namespace (sandbox.Private): it
// stacks layers (their directories and the image id-mapped for the
// sandbox, so the stacks show the tree's owners inside it) and runs argv
// in a sandbox whose root is the node's root as this namespace sees it.
func (b *Backend) runPrivate(ctx context.Context, layers []layerRef, argv []string) (string, error) {
	maps := []string{b.layersDir(), b.ImageDir()}
	if empty, err := b.emptyLayer(); err == nil {
		maps = append(maps, empty)
	}
	// Layer images are mounted (in this namespace) before they are
	// mapped; restack then stacks the mapped mounts.
	ms, err := mounts()
	if err != nil {
		return "", err
	}
	for _, l := range layers {
		if l.Image == nil {
			continue
		}
		dir, err := b.mountLayer(ctx, l, ms)
		if err != nil {
			return "", err
		}
		maps = append(maps, dir)
	}
	if _, err := sandbox.MapInPlace(maps...); err != nil {
		return "", err
	}
	if err := b.restack(ctx, layers); err != nil {
		return "", err
	}
	return sandbox.RunHere(ctx, sandbox.Spec{Root: b.n.Root, Argv: argv, FileCaps: true})
}
