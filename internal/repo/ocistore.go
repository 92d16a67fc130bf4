package repo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/retry"

	"github.com/strata-dev/strata/manifests"
)

// A repository in an OCI registry is one artifact, tagged (default
// "latest"): an OCI image manifest whose artifact type is
// ArtifactType and whose layers are the repository's members, each a
// blob of its own media type titled with its path. Pushing a new
// publication uploads only the blobs the registry lacks and moves the
// tag; nodes resolve the tag (one request) to see whether anything
// changed.
const (
	ArtifactType       = "application/vnd.strata.repository.v1"
	MediaIndex         = "application/vnd.strata.index.v1+json"
	MediaSignature     = "application/vnd.strata.signature.v1"
	MediaOverlay       = "application/vnd.strata.overlay.v1.tar"
	MediaImage         = "application/vnd.strata.image.v1.squashfs"
	MediaImageManifest = "application/vnd.strata.image-manifest.v1+json"
	MediaVerity        = "application/vnd.strata.verity.v1+json"
	MediaState         = "application/vnd.strata.state.v1+json"
	// MediaSegment is a sealed index segment.
	MediaSegment        = "application/vnd.strata.segment.v1+json"
	maxOCIManifestBytes = 4 << 20
)

// mediaType returns the media type of a repository member.
func mediaType(name string) string {
	switch {
	case name == IndexFile:
		return MediaIndex
	case strings.HasSuffix(name, ".minisig"):
		return MediaSignature
	case strings.HasPrefix(name, "overlays/"):
		return MediaOverlay
	case strings.HasSuffix(name, ".image.json"):
		return MediaImageManifest
	case strings.HasSuffix(name, ".verity.json"):
		return MediaVerity
	case strings.HasSuffix(name, ".squashfs"):
		return MediaImage
	case strings.HasPrefix(name, StateDir+"/"):
		return MediaState
	case strings.HasPrefix(name, SegmentDir+"/"):
		return MediaSegment
	}
	return "application/octet-stream"
}

// OCIStore is a repository held in an OCI registry (read through
// oras-go). It is read-only; strata repo push writes one.
type OCIStore struct {
	ref  string // the reference as given (oci://...)
	repo *remote.Repository
	tag  string

	mu       sync.Mutex
	manifest ocispec.Descriptor            // the artifact last resolved
	members  map[string]ocispec.Descriptor // its layers by title
	polled   digest.Digest                 // the artifact at the last Poll
}

var (
	_ Store  = (*OCIStore)(nil)
	_ Poller = (*OCIStore)(nil)
)

// OCI returns the store of the repository at ref: oci://HOST[:PORT]/NAME
// [:TAG] (TLS, except to a loopback registry, which is spoken to over
// plain HTTP as oras --plain-http does) or oci+http://... (plain HTTP to
// any registry). Credentials come from the Docker configuration
// (~/.docker/config.json, docker login), as oras and docker use them.
func OCI(ref string) (*OCIStore, error) {
	plain := false
	rest, ok := strings.CutPrefix(ref, "oci://")
	if !ok {
		if rest, ok = strings.CutPrefix(ref, "oci+http://"); !ok {
			return nil, fmt.Errorf("registry reference %q: want oci://HOST/NAME[:TAG]: %w", ref, ErrLocation)
		}
		plain = true
	}
	tag := "latest"
	if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
		rest, tag = rest[:i], rest[i+1:]
	}
	r, err := remote.NewRepository(rest)
	if err != nil {
		return nil, fmt.Errorf("registry reference %q: %v: %w", ref, err, ErrLocation)
	}
	if _, err := r.ParseReference(tag); err != nil {
		return nil, fmt.Errorf("registry reference %q: tag %q: %v: %w", ref, tag, err, ErrLocation)
	}
	host := r.Reference.Host()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		plain = true
	}
	r.PlainHTTP = plain
	// Bounded waits for connections and headers, as for HTTP
	// repositories; bodies have the idle watchdog (Open).
	client := &auth.Client{Client: &http.Client{Transport: retry.NewTransport(NewHTTPClient().Transport), CheckRedirect: checkRedirect}, Cache: auth.NewCache()}
	client.SetUserAgent("strata")
	if store, err := credentials.NewStoreFromDocker(credentials.StoreOptions{}); err == nil {
		client.Credential = credentials.Credential(store)
	}
	r.Client = client
	r.ManifestMediaTypes = []string{ocispec.MediaTypeImageManifest}
	return &OCIStore{ref: ref, repo: r, tag: tag}, nil
}

// String returns the reference.
func (o *OCIStore) String() string { return o.ref }

// Poll resolves the tag and reports whether it names another artifact
// than at the last Poll (true the first time): one request.
func (o *OCIStore) Poll(ctx context.Context) (bool, error) {
	desc, err := o.repo.Resolve(ctx, o.tag)
	if err != nil {
		return false, o.err("resolve", err)
	}
	o.mu.Lock()
	changed := desc.Digest != o.polled
	loaded := o.members != nil && desc.Digest == o.manifest.Digest
	o.mu.Unlock()
	if !loaded {
		if err := o.load(ctx, desc); err != nil {
			return false, err
		}
	}
	o.mu.Lock()
	o.polled = desc.Digest
	o.mu.Unlock()
	return changed, nil
}

// load fetches the artifact's manifest, bounded and verified against its
// digest, and indexes its layers by title.
func (o *OCIStore) load(ctx context.Context, desc ocispec.Descriptor) error {
	if desc.Size > maxOCIManifestBytes {
		return o.err("manifest", fmt.Errorf("%w: %d bytes (limit %d)", manifests.ErrTooLarge, desc.Size, maxOCIManifestBytes))
	}
	rc, err := o.repo.Fetch(ctx, desc)
	if err != nil {
		return o.err("manifest", err)
	}
	defer rc.Close()
	raw, err := content.ReadAll(rc, desc)
	if err != nil {
		return o.err("manifest", err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return o.err("manifest", err)
	}
	if m.Config.MediaType != ArtifactType && m.ArtifactType != ArtifactType {
		return o.err("manifest", fmt.Errorf("%w: not a strata repository (artifact type %q)", manifests.ErrInvalid, m.Config.MediaType))
	}
	members := map[string]ocispec.Descriptor{}
	for _, l := range m.Layers {
		name := l.Annotations[ocispec.AnnotationTitle]
		if !fs.ValidPath(name) || name == "." {
			return o.err("manifest", fmt.Errorf("%w: layer title %q", manifests.ErrUnsafePath, name))
		}
		if _, dup := members[name]; dup {
			return o.err("manifest", fmt.Errorf("%w: layer %q twice", manifests.ErrInvalid, name))
		}
		if err := l.Digest.Validate(); err != nil || l.Size < 0 {
			return o.err("manifest", fmt.Errorf("%w: layer %q: bad digest or size", manifests.ErrInvalid, name))
		}
		members[name] = l
	}
	o.mu.Lock()
	o.manifest, o.members = desc, members
	o.mu.Unlock()
	return nil
}

// Open fetches member name's blob; see Store. The reader checks the
// blob's digest at its end, so a registry serving other bytes fails the
// read.
func (o *OCIStore) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, 0, &fs.PathError{Op: "open", Path: o.ref + "/" + name, Err: manifests.ErrUnsafePath}
	}
	o.mu.Lock()
	loaded := o.members != nil
	o.mu.Unlock()
	if !loaded || name == IndexFile {
		// A reader that did not poll, or asks for the index again,
		// sees the tag as it is now.
		desc, err := o.repo.Resolve(ctx, o.tag)
		if err != nil {
			return nil, 0, o.err("resolve", err)
		}
		o.mu.Lock()
		same := o.members != nil && desc.Digest == o.manifest.Digest
		o.mu.Unlock()
		if !same {
			if err := o.load(ctx, desc); err != nil {
				return nil, 0, err
			}
		}
	}
	o.mu.Lock()
	d, ok := o.members[name]
	dir := !ok && hasMemberBelow(o.members, name)
	o.mu.Unlock()
	if dir {
		return nil, 0, &fs.PathError{Op: "open", Path: o.ref + "/" + name, Err: fmt.Errorf("a directory: %w", ErrNotRegular)}
	}
	if !ok {
		return nil, 0, &fs.PathError{Op: "open", Path: o.ref + "/" + name, Err: fs.ErrNotExist}
	}
	rctx, watch, cancel := withIdleTimeout(ctx)
	rc, err := o.repo.Blobs().Fetch(rctx, d)
	if err != nil {
		cancel()
		return nil, 0, &fs.PathError{Op: "fetch", Path: o.ref + "/" + name, Err: err}
	}
	rc = watch(rc)
	vr := content.NewVerifyReader(io.LimitReader(rc, d.Size), d)
	return &verifiedBlob{member: member{ctx: ctx, f: vr, left: d.Size}, rc: rc, vr: vr}, d.Size, nil
}

// verifiedBlob is a blob whose digest is checked when it is read whole.
type verifiedBlob struct {
	member
	rc io.Closer
	vr *content.VerifyReader
}

func (b *verifiedBlob) Read(p []byte) (int, error) {
	n, err := b.member.Read(p)
	if errors.Is(err, io.EOF) {
		if verr := b.vr.Verify(); verr != nil {
			return n, fmt.Errorf("%w: %v", ErrTampered, verr)
		}
	}
	return n, err
}

func (b *verifiedBlob) Close() error { return b.rc.Close() }

func (o *OCIStore) err(op string, err error) error {
	if errors.Is(err, errdef.ErrNotFound) {
		err = fmt.Errorf("%w: %v", fs.ErrNotExist, err)
	}
	return &fs.PathError{Op: op, Path: o.ref, Err: err}
}

// Push publishes the repository in directory dir to the registry at ref
// (see OCI): the index and its signature exactly as verified (nil trust:
// the images' keys), then every member the index names, each opened as a
// repository member (never through a symlink, never a FIFO or device)
// and checked against the size and SHA-256 (or manifest digest) the index
// records, as blobs the registry does not have yet; then the artifact,
// then the tag. Nothing unverified is pushed; readers verify everything
// again.
func Push(ctx context.Context, dir, ref string, progress func(string)) (ocispec.Descriptor, error) {
	if progress == nil {
		progress = func(string) {}
	}
	o, err := OCI(ref)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	r, err := Open(ctx, dir, nil)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	type pushed struct {
		name string
		size int64  // -1: not recorded (signatures: verified by readers)
		sum  string // bare hex SHA-256, "" when not recorded
		data []byte // pushed from memory (the index, as verified)
	}
	members := []pushed{{name: IndexFile, size: -1, data: r.raw}, {name: SigPath(IndexFile), size: -1, data: r.sig}}
	for i := range r.Index.Lines {
		l := &r.Index.Lines[i]
		for _, seg := range l.SegmentRefs() {
			members = append(members, pushed{name: seg.File, size: seg.Size, sum: seg.SHA256})
		}
		if err := r.Expand(ctx, l); err != nil {
			return ocispec.Descriptor{}, err
		}
		for _, im := range append([]manifests.ImageRef{l.Image}, l.Upgrades...) {
			mp := ManifestPath(im.File)
			members = append(members, pushed{name: im.File, size: im.Size, sum: im.SHA256},
				pushed{name: mp, size: -1, sum: strings.TrimPrefix(im.Digest, manifests.DigestPrefix)},
				pushed{name: SigPath(mp), size: -1})
			// The verity record, when the image has one (readers verify
			// it against the manifest).
			vp := VerityPath(im.File)
			if there, err := Exists(ctx, Dir(dir), vp); err != nil {
				return ocispec.Descriptor{}, err
			} else if there {
				members = append(members, pushed{name: vp, size: -1}, pushed{name: SigPath(vp), size: -1})
			}
			if b := im.Boot; b != nil {
				members = append(members, pushed{name: b.File, size: b.Size, sum: b.SHA256})
			}
		}
		for _, ov := range l.Overlays {
			members = append(members, pushed{name: ov.File, size: ov.Size, sum: ov.SHA256})
		}
		if l.State != nil {
			members = append(members, pushed{name: l.State.File, size: l.State.Size, sum: l.State.SHA256})
		}
	}
	// Members go up pushParallel at a time (each checked before it is
	// sent, as one at a time would); the artifact lists them in order.
	st := Dir(dir)
	layers := make([]ocispec.Descriptor, len(members))
	var progressMu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(pushParallel)
	for i, m := range members {
		g.Go(func() error {
			var d ocispec.Descriptor
			var err error
			if m.data != nil {
				d, err = pushBytes(gctx, o.repo, m.name, m.data)
			} else {
				d, err = pushMember(gctx, o.repo, st, m.name, m.size, m.sum)
			}
			if err != nil {
				return err
			}
			layers[i] = d
			progressMu.Lock()
			defer progressMu.Unlock()
			progress(fmt.Sprintf("pushed %s (%d bytes)", m.name, d.Size))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return ocispec.Descriptor{}, err
	}
	desc, err := oras.PackManifest(ctx, o.repo, oras.PackManifestVersion1_0, ArtifactType, oras.PackManifestOptions{
		Layers:              layers,
		ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "1970-01-01T00:00:00Z"},
	})
	if err != nil {
		return ocispec.Descriptor{}, o.err("push manifest", err)
	}
	if err := o.repo.Tag(ctx, desc, o.tag); err != nil {
		return ocispec.Descriptor{}, o.err("tag", err)
	}
	progress(fmt.Sprintf("tagged %s as %s", desc.Digest, o.tag))
	return desc, nil
}

func layer(name string, dg digest.Digest, size int64) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: mediaType(name), Digest: dg, Size: size,
		Annotations: map[string]string{ocispec.AnnotationTitle: path.Clean(name)}}
}

// pushBytes pushes data as a blob titled name, unless the registry has it.
func pushBytes(ctx context.Context, repo *remote.Repository, name string, data []byte) (ocispec.Descriptor, error) {
	d := layer(name, digest.FromBytes(data), int64(len(data)))
	return d, pushBlob(ctx, repo, d, func() (io.Reader, error) { return bytes.NewReader(data), nil })
}

// pushMember pushes repository member name of st, checked against size
// and sum when the index records them.
func pushMember(ctx context.Context, repo *remote.Repository, st *DirStore, name string, size int64, sum string) (ocispec.Descriptor, error) {
	f, fi, err := st.OpenFile(ctx, name)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("pushing %s: %w", name, err)
	}
	defer f.Close()
	if size >= 0 && fi.Size() != size {
		return ocispec.Descriptor{}, fmt.Errorf("pushing %s: %d bytes, the index says %d: %w", name, fi.Size(), size, ErrTampered)
	}
	if fi.Size() > maxPushSignature && size < 0 && sum == "" {
		return ocispec.Descriptor{}, fmt.Errorf("pushing %s: %w: %d bytes for a signature", name, manifests.ErrTooLarge, fi.Size())
	}
	dg, err := digest.SHA256.FromReader(io.LimitReader(f, fi.Size()))
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("pushing %s: %w", name, err)
	}
	if sum != "" && dg.Encoded() != sum {
		return ocispec.Descriptor{}, fmt.Errorf("pushing %s: sha256 %s, the index says %s: %w", name, dg.Encoded(), sum, ErrTampered)
	}
	d := layer(name, dg, fi.Size())
	return d, pushBlob(ctx, repo, d, func() (io.Reader, error) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		return io.LimitReader(f, fi.Size()), nil
	})
}

// pushParallel is how many members Push sends at once (as the ORAS
// CLI's default): a push is mostly round trips, one after another per
// member (does the registry have it, start the upload, send it).
const pushParallel = 5

// maxPushSignature bounds a member the index does not size: a signature.
const maxPushSignature = 64 << 10

// pushBlob uploads d's content unless the registry has it; the registry
// checks the digest of what arrives.
func pushBlob(ctx context.Context, repo *remote.Repository, d ocispec.Descriptor, content func() (io.Reader, error)) error {
	name := d.Annotations[ocispec.AnnotationTitle]
	exists, err := repo.Exists(ctx, d)
	if err != nil {
		return fmt.Errorf("pushing %s: %w", name, err)
	}
	if exists {
		return nil
	}
	rd, err := content()
	if err != nil {
		return fmt.Errorf("pushing %s: %w", name, err)
	}
	if err := repo.Push(ctx, d, rd); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return fmt.Errorf("pushing %s: %w", name, err)
	}
	return nil
}
