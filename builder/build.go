package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Result names what a build wrote.
type Result struct {
	// Image is the squashfs file, Manifest the signed manifest beside it.
	Image    string
	Manifest string
	// Digest is the manifest's digest, the image's identity in its line.
	Digest string
	// ManifestData is the decoded manifest.
	ManifestData *manifests.ImageManifest
	// Verity is the image's dm-verity record, written beside it as
	// <line>-<version>.verity.json; the hash tree is appended to Image.
	Verity *manifests.Verity
}

// Build builds the image a recipe describes into outDir as
// <line>-<version>.squashfs plus <line>-<version>.image.json (and .minisig
// when a key is given).
func Build(ctx context.Context, recipePath, outDir string, opts ...Option) (*Result, error) {
	s := newSettings(opts)
	r, err := LoadRecipe(recipePath)
	if err != nil {
		return nil, err
	}
	epoch := r.Epoch
	if s.epoch != nil {
		epoch = *s.epoch
	}
	keys, err := trustSet(r, s)
	if err != nil {
		return nil, fmt.Errorf("recipe %s: %w", recipePath, err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("building image: %w", err)
	}
	staged := &blobs{parent: outDir}
	defer staged.Close()
	s.progress("assembling tree from " + recipePath)
	l, err := assemble(ctx, r, s, staged, keys)
	if err != nil {
		return nil, fmt.Errorf("recipe %s: %w", recipePath, err)
	}
	if err := l.putKeys(keys); err != nil {
		return nil, err
	}
	s.progress("computing service catalog")
	var decl []catalog.Declared
	for _, svc := range r.Services {
		for _, p := range svc.Paths {
			rel, _ := TreePath(p)
			decl = append(decl, catalog.Declared{Unit: svc.Unit, Path: rel})
		}
		for _, p := range svc.Reload {
			rel, _ := TreePath(p)
			decl = append(decl, catalog.Declared{Unit: svc.Unit, Path: rel, Reload: true})
		}
	}
	cat, err := catalog.Build(tree.NewFS(l.state, l.open), decl)
	if err != nil {
		return nil, fmt.Errorf("recipe %s: service catalog: %w", recipePath, err)
	}
	for _, svc := range r.Services {
		if err := catalog.SetCommands(&cat, svc.Unit, svc.Validate, svc.Check); err != nil {
			return nil, fmt.Errorf("recipe %s: service catalog: %w", recipePath, err)
		}
	}
	files := l.state.Entries()
	managed, err := r.managed()
	if err != nil {
		return nil, err
	}
	data, err := r.data(managed)
	if err != nil {
		return nil, err
	}
	m := &manifests.ImageManifest{
		Schema:      manifests.Schema,
		Kind:        manifests.KindImage,
		Line:        r.Line,
		Version:     r.Version,
		Created:     time.Unix(epoch, 0).UTC().Format(time.RFC3339),
		Recipe:      r.digest,
		Compressor:  compressorOf(r.Compressor),
		TreeDigest:  manifests.TreeDigest(files),
		Keys:        keys.Strings(),
		Catalog:     cat,
		Hierarchies: managed,
		Data:        data,
		Files:       files,
	}
	return writeImage(ctx, outDir, m, l, s, epoch)
}

// trustSet is the keys the image will trust: the build key's public half
// plus the recipe's keys.
func trustSet(r *Recipe, s *settings) (*sign.KeySet, error) {
	keys := &sign.KeySet{}
	if s.key != nil {
		if err := keys.Merge(s.key.PublicKeySet()); err != nil {
			return nil, err
		}
	}
	for _, k := range r.Keys {
		if err := keys.Merge(sign.LoadPublicFile(r.Path(k))); err != nil {
			return nil, fmt.Errorf("keys: %w", err)
		}
	}
	return keys, nil
}

// assemble builds the image's tree: base, files, remove, steps, then the
// strata binary and units. An image base must be signed by a key of trust
// (when trust is empty, by a key it lists itself).
func assemble(ctx context.Context, r *Recipe, s *settings, staged *blobs, trust *sign.KeySet) (*layout, error) {
	l := newLayout()
	baseTrust := trust
	if trust.Len() == 0 {
		baseTrust = nil
	}
	if err := l.loadBase(ctx, r, s, staged, baseTrust); err != nil {
		return nil, fmt.Errorf("base: %w", err)
	}
	for _, f := range r.Files {
		if err := l.addFile(r, f); err != nil {
			return nil, err
		}
	}
	for _, p := range r.Remove {
		rel, _ := TreePath(p)
		if err := l.remove(rel); err != nil {
			return nil, fmt.Errorf("remove: %w", err)
		}
	}
	if err := l.applySteps(ctx, r, s); err != nil {
		return nil, err
	}
	if err := l.bakeStrata(r, s); err != nil {
		return nil, err
	}
	return l, nil
}

func compressorOf(c string) string {
	if c == "" {
		return "zstd"
	}
	return c
}

// putKeys bakes the trusted keys in as KeysDir/<KEYID>.pub.
func (l *layout) putKeys(keys *sign.KeySet) error {
	if err := l.mkdirs(manifests.KeysDir); err != nil {
		return err
	}
	for name, data := range keys.Files() {
		e := fileEntry(manifests.KeysDir+"/"+name, data, 0644)
		if err := l.put(e, source{data: data}); err != nil {
			return err
		}
	}
	return nil
}

func fileEntry(p string, data []byte, mode manifests.Mode) manifests.Entry {
	return manifests.Entry{Path: p, Type: manifests.TypeFile, Mode: mode, Size: int64(len(data)), SHA256: manifests.Digest(data)[len(manifests.DigestPrefix):]}
}

// writeImage signs m, streams l plus the manifest copy into mksquashfs and
// writes the manifest files beside the image.
func writeImage(ctx context.Context, outDir string, m *manifests.ImageManifest, l *layout, s *settings, epoch int64) (*Result, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("building %s-%s: %w", m.Line, m.Version, err)
	}
	raw, err := manifests.Encode(m)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("building image: %w", err)
	}
	if err := l.put(fileEntry(manifests.ImageManifestPath, raw, 0644), source{data: raw}); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s-%s", m.Line, m.Version)
	img := filepath.Join(outDir, name+".squashfs")
	if err := checkOverwrite(img, raw); err != nil {
		return nil, err
	}
	s.progress(fmt.Sprintf("writing %s (%d entries, %s)", img, len(l.state), m.Compressor))
	v, err := writeSealed(ctx, img, m, manifests.Digest(raw), s, func(out string) error {
		return streamImage(ctx, out, m.Compressor, epoch, l.state.Entries(), tree.Opener(l.open), s)
	})
	if err != nil {
		return nil, err
	}
	if err := writeManifest(img, raw, s, sign.ImageComment(m.Line, m.Version)); err != nil {
		return nil, err
	}
	mp := repo.ManifestPath(img)
	return &Result{Image: img, Manifest: mp, Digest: manifests.Digest(raw), ManifestData: m, Verity: v}, nil
}
