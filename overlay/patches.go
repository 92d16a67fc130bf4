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

	"github.com/strata-dev/strata/internal/imagefile"
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

// patchMemory bounds what one round of patches holds: each file weighs
// twice its old and new contents (the contents, the encoder's window and
// dictionary tables).
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
	// Rounds of as many files as the memory budget holds (at least one),
	// each file's patch made a few at a time, results kept in path order.
	made := make([][]byte, len(todo))
	for start := 0; start < len(todo); {
		end, weight := start, int64(0)
		for ; end < len(todo); end++ {
			w := 2 * (c.State[todo[end].Path].Size + todo[end].Size)
			if end > start && weight+w > patchMemory {
				break
			}
			weight += w
		}
		if err := patchRound(ctx, c, todo[start:end], made[start:end], open); err != nil {
			return nil, err
		}
		start = end
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

// patchRound makes the patches of round into made (nil where one would
// not pay), a few at a time: the bases the image holds are read from it
// first, in one pass, the others (and any the pass did not give) each on
// its own.
func patchRound(ctx context.Context, c *Chain, round []manifests.Entry, made [][]byte, open tree.Opener) error {
	bases, err := imageBases(ctx, c, round)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, e := range round {
		g.Go(func() error {
			p, err := makePatch(gctx, c, c.State[e.Path], e, open, bases[i])
			made[i], bases[i] = p, nil
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// imageBases returns, by index in round, the head's content of each file
// whose content at the head is the image's (the same digest: an overlay
// that shipped the same bytes again changes nothing), read from the
// image in one pass and each checked against its digest; nil where the
// head's content is not the image's or the pass did not give it (the
// caller reads that one on its own, and reports what it finds). Only
// cancellation is an error.
func imageBases(ctx context.Context, c *Chain, round []manifests.Entry) ([][]byte, error) {
	out := make([][]byte, len(round))
	at := make(map[string]int, len(round))
	for i, e := range round {
		at[e.Path] = i
	}
	var files []imagefile.File
	var idx []int
	for _, ie := range c.Image.Manifest.Files {
		i, ok := at[ie.Path]
		if old := c.State[ie.Path]; ok && ie.Type == manifests.TypeFile && ie.SHA256 == old.SHA256 && ie.Size == old.Size {
			files = append(files, imagefile.File{Rel: ie.Path, Size: ie.Size})
			idx = append(idx, i)
		}
	}
	if len(files) < 2 {
		return out, nil // one is read on its own all the same
	}
	_ = imagefile.CatFiles(ctx, c.Repo.Path(c.Line.Image.File), files, func(k int, b []byte) error {
		if manifests.Digest(b) == manifests.DigestPrefix+c.State[files[k].Rel].SHA256 {
			out[idx[k]] = b
		}
		return nil
	})
	return out, ctx.Err()
}

// makePatch returns the patch from old's content (base, when the caller
// has it already) to e's, or nil when one would not pay.
func makePatch(ctx context.Context, c *Chain, old, e manifests.Entry, open tree.Opener, base []byte) ([]byte, error) {
	if base == nil {
		var err error
		base, err = contentBelow(ctx, c, c.Len(), old.Path, old.SHA256, maxPatchChain)
		if errors.Is(err, errPatchChain) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading /%s at the head to patch it: %w", e.Path, err)
		}
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
