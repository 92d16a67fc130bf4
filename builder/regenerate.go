package builder

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/imagefile"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Regenerate folds the line's image and its overlays up to version through
// (empty: the head) into a fresh image in outDir. Its manifest records the
// original image as Base and the last overlay folded in as Head, so a node
// provisioned from it joins the line at that head. The base image streams
// from the squashfs straight into mksquashfs; only the overlays' files are
// staged. The result is reproducible: times come from the head overlay.
func Regenerate(ctx context.Context, repoDir, line, through, outDir string, opts ...Option) (*Result, error) {
	s := newSettings(opts)
	r, c, done, err := loadSigned(ctx, repoDir, line, through, s)
	if err != nil {
		return nil, err
	}
	defer done()
	if len(c.Overlays) == 0 {
		return nil, fmt.Errorf("regenerating line %s: no overlay to fold in at %s; the line's image is already current", c.Line.Name, c.Head().Version)
	}
	base := c.Image.Manifest
	head := c.Head()
	created, _ := time.Parse(time.RFC3339, c.Overlays[len(c.Overlays)-1].Manifest.Created)
	epoch := created.Unix()
	if s.epoch != nil {
		epoch = *s.epoch
	}
	// The image trusts what the line trusts at its head: the key
	// rotations folded in changed the key files, and the list with them.
	keys := c.Keys.Strings()
	m := &manifests.ImageManifest{
		Schema:      manifests.Schema,
		Kind:        manifests.KindImage,
		Line:        base.Line,
		Version:     base.Version + "+head." + head.Version,
		Created:     time.Unix(epoch, 0).UTC().Format(time.RFC3339),
		Recipe:      base.Recipe,
		Base:        &manifests.Ref{Version: base.Version, Digest: c.Image.Digest},
		Head:        &head,
		Compressor:  base.Compressor,
		TreeDigest:  c.State.Digest(),
		Keys:        keys,
		Catalog:     c.Catalog,
		Hierarchies: base.Hierarchies,
		Data:        base.Data,
		Files:       c.State.Entries(),
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("regenerating %s: %w", c.Line.Name, err)
	}
	raw, err := manifests.Encode(m)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s-%s", m.Line, m.Version)
	img := filepath.Join(outDir, name+".squashfs")
	// The output directory (and its parents) made here go again if the
	// regeneration fails or is interrupted; so does a written image.
	undoDirs, err := safefile.MkdirParents(img)
	if err != nil {
		return nil, fmt.Errorf("regenerating: %w", err)
	}
	_, statErr := os.Lstat(img)
	existed := statErr == nil
	written, ok := false, false
	defer func() {
		if !ok {
			if written && !existed {
				_ = os.Remove(img)
				_ = os.Remove(repo.VerityPath(img))
				_ = os.Remove(repo.SigPath(repo.VerityPath(img)))
			}
			undoDirs()
		}
	}()
	if err := checkOverwrite(img, raw); err != nil {
		return nil, err
	}
	s.progress(fmt.Sprintf("writing %s (%s folded through %s)", img, base.Version, head.Version))
	baseImage := r.Path(c.Line.Image.File)
	if r.Dir == "" {
		// A remote repository: the base image streams from a local copy.
		tmpDir, err := scratch.MkdirTemp("regenerate")
		if err != nil {
			return nil, fmt.Errorf("regenerating: %w", err)
		}
		defer tmpDir.RemoveAll()
		tmp := tmpDir.Path
		if baseImage, err = repo.FetchImage(ctx, r, c.Line, tmp); err != nil {
			return nil, err
		}
	}
	format, err := imagefile.Detect(baseImage)
	if err != nil {
		return nil, err
	}
	written = true
	v, err := writeSealed(ctx, img, m, manifests.Digest(raw), s, func(out string) error {
		return format.Write(ctx, out, imagefile.WriteOptions{Compressor: m.Compressor, Epoch: epoch}, func(w io.Writer) error {
			return foldStream(ctx, w, baseImage, c.Fold, raw, epoch)
		})
	})
	if err != nil {
		return nil, err
	}
	if err := writeManifest(img, raw, s, sign.ImageComment(m.Line, m.Version)); err != nil {
		return nil, err
	}
	ok = true
	return &Result{Image: img, Manifest: repo.ManifestPath(img), Digest: manifests.Digest(raw), ManifestData: m, Verity: v}, nil
}

// loadSigned opens the repository and the chain to fold. Signing vouches
// for the result: with a key, the index must be signed by that key, and
// the line's image and every overlay by it or the keys WithTrust adds (as
// key rotations change them), not merely by keys the repository's own
// image lists; the line must trust the key at the head the image is made
// of.
func loadSigned(ctx context.Context, repoDir, line, through string, s *settings) (r *repo.Repo, c *repo.Chain, done func(), err error) {
	var trust *sign.KeySet
	if s.key != nil {
		if trust, err = s.key.PublicKeySet(); err != nil {
			return nil, nil, nil, err
		}
		if s.trust != nil {
			_ = trust.Merge(s.trust, nil)
		}
	}
	st, err := repo.Locate(repoDir)
	if err != nil {
		return nil, nil, nil, err
	}
	// Each overlay is read more than once (hash, manifest, payload): a
	// remote one is fetched once.
	st, cleanup, err := repo.ForRereads(st)
	if err != nil {
		return nil, nil, nil, err
	}
	done = cleanup
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	if r, err = repo.OpenStore(ctx, st, trust); err != nil {
		return nil, nil, nil, err
	}
	if c, err = repo.LoadChain(ctx, r, line, through, trust); err != nil {
		return nil, nil, nil, err
	}
	if s.key == nil {
		return r, c, done, nil
	}
	// The --pub keys verify the line's history only: the index, which
	// pins every member's digest, must be signed with the key that signs
	// the result, so a chain forged with an old (perhaps compromised) key
	// cannot be laundered into an image the new one vouches for.
	if through == "" || through == c.Line.Head().Version {
		if err := c.CheckIndexKey(); err != nil {
			return nil, nil, nil, fmt.Errorf("regenerating: %w", err)
		}
	}
	if r.KeyID != s.key.ID() {
		return nil, nil, nil, fmt.Errorf("regenerating line %s: the index is signed by key %s, not by --key %s, which must sign it: %w", c.Line.Name, r.KeyID, s.key.ID(), sign.ErrBadSignature)
	}
	if !c.Keys.HasKey(s.key) {
		return nil, nil, nil, fmt.Errorf("regenerating line %s at %s: key %s is not one the line trusts there (trusted: %s): %w", c.Line.Name, c.Head().Version, s.key.ID(), strings.Join(c.Keys.IDs(), ", "), sign.ErrBadSignature)
	}
	return r, c, done, nil
}

// foldStream writes the folded tree as tar (see tree.Fold.WriteTar: the
// base image's surviving files stream from sqfs2tar, each overlay's payload
// streams once), then the new manifest copy (none when raw is nil).
func foldStream(ctx context.Context, w io.Writer, baseImage string, fold *tree.Fold, raw []byte, epoch int64) error {
	tw := tar.NewWriter(w)
	rd, err := imagefile.Open(ctx, baseImage)
	if err != nil {
		return err
	}
	err = fold.WriteTar(ctx, tw, tree.NewReader(rd, tree.Limits{}), epoch)
	if cerr := rd.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if raw != nil {
		me := fileEntry(manifests.ImageManifestPath, raw, 0644)
		if err := tree.WriteEntry(tw, me, func(manifests.Entry) (io.ReadCloser, error) { return io.NopCloser(bytesReader(raw)), nil }, epoch); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeManifest writes the manifest (and its signature when a key is set,
// with the trusted comment sign.ImageComment gives) beside img.
func writeManifest(img string, raw []byte, s *settings, comment string) error {
	mp := repo.ManifestPath(img)
	if s.key != nil {
		if err := safefile.WriteAtomic(repo.SigPath(mp), s.key.Sign(raw, comment), 0o644); err != nil {
			return err
		}
	} else {
		_ = os.Remove(repo.SigPath(mp))
	}
	if err := safefile.WriteAtomic(mp, raw, 0o644); err != nil {
		return err
	}
	s.progress("wrote " + mp)
	return nil
}
