package builder

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/squashfs"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/overlay"
)

// Regenerate folds the line's image and its overlays up to version through
// (empty: the head) into a fresh image in outDir. Its manifest records the
// original image as Base and the last overlay folded in as Head, so a node
// provisioned from it joins the line at that head. The base image streams
// from the squashfs straight into mksquashfs; only the overlays' files are
// staged. The result is reproducible: times come from the head overlay.
func Regenerate(ctx context.Context, repoDir, line, through, outDir string, opts ...Option) (*Result, error) {
	s := newSettings(opts)
	// Signing vouches for the result: with a key, the repository and every
	// overlay must be signed by that key, not merely by keys the
	// repository's own image lists.
	var trust *sign.KeySet
	if s.key != nil {
		var err error
		if trust, err = s.key.PublicKeySet(); err != nil {
			return nil, err
		}
	}
	r, err := repo.Open(repoDir, trust)
	if err != nil {
		return nil, err
	}
	c, err := overlay.LoadChain(ctx, r, line, through, trust)
	if err != nil {
		return nil, err
	}
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
	keys := append([]string{}, base.Keys...)
	m := &manifests.ImageManifest{
		Schema:     manifests.Schema,
		Kind:       manifests.KindImage,
		Line:       base.Line,
		Version:    base.Version + "+head." + head.Version,
		Created:    time.Unix(epoch, 0).UTC().Format(time.RFC3339),
		Recipe:     base.Recipe,
		Base:       &manifests.Ref{Version: base.Version, Digest: c.Image.Digest},
		Head:       &head,
		Compressor: base.Compressor,
		TreeDigest: c.State.Digest(),
		Keys:       keys,
		Catalog:    c.Catalog,
		Files:      c.State.Entries(),
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("regenerating %s: %w", c.Line.Name, err)
	}
	raw, err := manifests.Encode(m)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("regenerating: %w", err)
	}
	blobs, err := os.MkdirTemp(outDir, ".regenerate-")
	if err != nil {
		return nil, fmt.Errorf("regenerating: %w", err)
	}
	defer os.RemoveAll(blobs)
	s.progress(fmt.Sprintf("staging files of %d overlay(s)", len(c.Overlays)))
	for _, a := range c.Overlays {
		err := a.Payload(ctx, func(e manifests.Entry, rd io.Reader) error {
			if e.Type != manifests.TypeFile {
				return nil
			}
			p := filepath.Join(blobs, e.SHA256)
			if _, err := os.Stat(p); err == nil {
				return nil
			}
			return tree.Create(p, manifests.Entry{Type: manifests.TypeFile, Mode: 0600, Size: e.Size, SHA256: e.SHA256}, rd)
		})
		if err != nil {
			return nil, err
		}
	}
	name := fmt.Sprintf("%s-%s", m.Line, m.Version)
	img := filepath.Join(outDir, name+".squashfs")
	s.progress(fmt.Sprintf("writing %s (%s folded through %s)", img, base.Version, head.Version))
	baseImage := r.Path(c.Line.Image.File)
	err = squashfs.Write(ctx, img, squashfs.WriteOptions{Compressor: m.Compressor, Epoch: epoch}, func(w io.Writer) error {
		return foldStream(ctx, w, baseImage, base, c.State, blobs, raw, epoch)
	})
	if err != nil {
		return nil, err
	}
	if err := writeManifest(img, raw, s, name); err != nil {
		return nil, err
	}
	return &Result{Image: img, Manifest: repo.ManifestPath(img), Digest: manifests.Digest(raw), ManifestData: m}, nil
}

// foldStream writes the folded tree as tar: directories first, then the
// base image's files that survive (streamed from sqfs2tar), then symlinks
// and the overlays' files, then the new manifest copy.
func foldStream(ctx context.Context, w io.Writer, baseImage string, base *manifests.ImageManifest, final tree.State, blobs string, raw []byte, epoch int64) error {
	tw := tar.NewWriter(w)
	entries := final.Entries()
	for _, e := range entries {
		if e.Type == manifests.TypeDir {
			if err := tree.WriteEntry(tw, e, nil, epoch); err != nil {
				return err
			}
		}
	}
	baseState := tree.NewState(base.Files)
	done := map[string]bool{}
	rd, err := squashfs.Open(ctx, baseImage)
	if err != nil {
		return err
	}
	tr := tree.NewReader(rd, tree.Limits{})
	for {
		e, content, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			rd.Close()
			return err
		}
		f, ok := final[e.Path]
		b := baseState[e.Path]
		if !ok || f.Type != manifests.TypeFile || e.Type != manifests.TypeFile || b.SHA256 != f.SHA256 {
			continue
		}
		open := func(manifests.Entry) (io.ReadCloser, error) { return io.NopCloser(content), nil }
		if err := tree.WriteEntry(tw, f, open, epoch); err != nil {
			rd.Close()
			return err
		}
		done[e.Path] = true
	}
	if err := rd.Close(); err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type == manifests.TypeDir || done[e.Path] {
			continue
		}
		open := func(e manifests.Entry) (io.ReadCloser, error) { return os.Open(filepath.Join(blobs, e.SHA256)) }
		if err := tree.WriteEntry(tw, e, open, epoch); err != nil {
			return fmt.Errorf("folding %s: %w", e.Path, err)
		}
	}
	me := fileEntry(manifests.ImageManifestPath, raw, 0644)
	if err := tree.WriteEntry(tw, me, func(manifests.Entry) (io.ReadCloser, error) { return io.NopCloser(bytesReader(raw)), nil }, epoch); err != nil {
		return err
	}
	return tw.Close()
}

// writeManifest writes the manifest (and its signature when a key is set)
// beside img.
func writeManifest(img string, raw []byte, s *settings, name string) error {
	mp := repo.ManifestPath(img)
	if s.key != nil {
		if err := node.WriteFileAtomic(repo.SigPath(mp), s.key.Sign(raw, "strata image "+name), 0o644); err != nil {
			return err
		}
	} else {
		_ = os.Remove(repo.SigPath(mp))
	}
	if err := node.WriteFileAtomic(mp, raw, 0o644); err != nil {
		return err
	}
	s.progress("wrote " + mp)
	return nil
}
