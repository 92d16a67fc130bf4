package overlay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/strata-dev/strata/internal/patch"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// patchRecord is about what a patch's record adds to the manifest.
const patchRecord = 256

// maxPatchChain bounds how many patches deep create rebuilds a file's
// head content to patch it again: deeper, the file ships whole, and the
// next patch is made against that, so publishing stays bounded however
// often a file changes.
const maxPatchChain = 8

// patchMemory bounds what the patches being made at once hold: each
// weighs twice its old and new contents (the contents, the encoder's
// window and dictionary tables).
const patchMemory = 4 * 2 * manifests.MaxPatchTarget

// patches are the files a new overlay ships as patches: the manifest's
// list and the patch bytes by path.
type patches struct {
	list  []manifests.Patch
	bytes map[string][]byte
}

// makePatches picks, among entries (sorted by path), the large files the
// head has as files too, and makes for each the patch against the head's
// content (read back from the repository); a patch is made only when the
// two share enough content (patch.Similar) and kept only when it is
// smaller than the new content compressed on its own, by more than its
// manifest record costs.
func makePatches(ctx context.Context, c *Chain, entries []manifests.Entry, open tree.Opener) (*patches, error) {
	var todo []manifests.Entry
	for _, e := range entries {
		old, ok := c.State[e.Path]
		if e.Type == manifests.TypeFile && ok && old.Type == manifests.TypeFile && patch.Worth(old.Size, e.Size) {
			todo = append(todo, e)
		}
	}
	// Reading a base back (rdsquashfs, a process each) dominates: the
	// files are worked on a few at a time, results kept in path order.
	made := make([][]byte, len(todo))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	mem := semaphore.NewWeighted(patchMemory)
	for i, e := range todo {
		weight := 2 * (c.State[e.Path].Size + e.Size)
		if err := mem.Acquire(gctx, weight); err != nil {
			break // cancelled: Wait reports why
		}
		g.Go(func() error {
			defer mem.Release(weight)
			p, err := makePatch(gctx, c, c.State[e.Path], e, open)
			made[i] = p
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ps := &patches{bytes: map[string][]byte{}}
	for i, e := range todo {
		p := made[i]
		if p == nil {
			continue
		}
		sum := sha256.Sum256(p)
		ps.list = append(ps.list, manifests.Patch{Path: e.Path, Base: c.State[e.Path].SHA256, Size: int64(len(p)), SHA256: hex.EncodeToString(sum[:])})
		ps.bytes[e.Path] = p
	}
	return ps, nil
}

// makePatch returns the patch from old's content to e's, or nil when one
// would not pay.
func makePatch(ctx context.Context, c *Chain, old, e manifests.Entry, open tree.Opener) ([]byte, error) {
	base, err := contentBelow(ctx, c, c.Len(), old.Path, old.SHA256, maxPatchChain)
	if errors.Is(err, errPatchChain) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading /%s at the head to patch it: %w", e.Path, err)
	}
	content, err := readEntry(open, e)
	if err != nil {
		return nil, err
	}
	if !patch.Similar(base, content) {
		return nil, nil
	}
	p, err := patch.Make(base, content)
	if err != nil {
		return nil, fmt.Errorf("patching /%s: %w", e.Path, err)
	}
	if len(p)+patchRecord >= patch.Compressed(content) {
		return nil, nil
	}
	return p, nil
}

// opener returns open with the patches in place of the files they stand
// for.
func (ps *patches) opener(open tree.Opener) tree.Opener {
	return func(e manifests.Entry) (io.ReadCloser, error) {
		if p, ok := ps.bytes[e.Path]; ok {
			return io.NopCloser(bytes.NewReader(p)), nil
		}
		return open(e)
	}
}

// readEntry reads file entry e whole through open, checking its size and
// digest.
func readEntry(open tree.Opener, e manifests.Entry) ([]byte, error) {
	rc, err := open(e)
	if err != nil {
		return nil, fmt.Errorf("opening /%s: %w", e.Path, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, e.Size+1))
	if err != nil {
		return nil, fmt.Errorf("reading /%s: %w", e.Path, err)
	}
	if sum := sha256.Sum256(b); int64(len(b)) != e.Size || hex.EncodeToString(sum[:]) != e.SHA256 {
		return nil, fmt.Errorf("reading /%s: content changed since it was scanned (%d bytes, want %d)", e.Path, len(b), e.Size)
	}
	return b, nil
}
