package overlay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/compress"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// RotateOptions are the settings of RotateKeys.
type RotateOptions struct {
	// Version is the rotation overlay's version; default: the next patch
	// version after the line's head.
	Version string
	// Line picks the line (optional when the repository has one).
	Line string
	// Add are public keys to trust, in .pub file or one-line base64 form.
	Add [][]byte
	// Revoke are ids of keys to stop trusting.
	Revoke []string
	// IndexKey signs the index from now on; default the signing key,
	// which must then stay trusted.
	IndexKey *sign.Key
	// Created is the manifest timestamp; default now.
	Created time.Time
}

// RotateKeys publishes a key rotation: the next overlay of the line,
// signed with key (trusted at the head), whose only change is the trusted
// key files, adding o.Add and deleting o.Revoke. Nodes apply it in
// sequence like any overlay; from the next overlay on, they and every
// reader of the repository trust the keys it leaves, and the index is
// signed with one of them. Nothing is written unless every check passes.
func RotateKeys(ctx context.Context, repoDir string, key *sign.Key, o RotateOptions) (*Created, error) {
	r, c, unlock, err := openHead(ctx, repoDir, o.Line, "rotating keys")
	if err != nil {
		return nil, err
	}
	defer unlock()
	head := c.Head()
	if o.Version == "" {
		v, err := manifests.ParseVersion(head.Version)
		if err != nil {
			return nil, err
		}
		o.Version = v.IncPatch().String()
	}
	if err := manifests.CheckGreater(o.Version, head.Version); err != nil {
		return nil, fmt.Errorf("rotating keys of line %s (head %s): %w", c.Line.Name, head.Version, err)
	}
	if err := checkSigner(c, key); err != nil {
		return nil, err
	}
	rot, err := rotation(c, o)
	if err != nil {
		return nil, err
	}
	m := &manifests.OverlayManifest{
		Schema:    manifests.Schema,
		Kind:      manifests.KindOverlay,
		Line:      c.Line.Name,
		Version:   o.Version,
		Parent:    head,
		Lineage:   manifests.WindowLineage(c.Lineage()),
		Requires:  manifests.Requires{Image: "^" + c.Image.Manifest.Version},
		Entries:   []manifests.Entry{},
		Deletes:   []string{},
		Services:  []manifests.ServiceAction{},
		Unclaimed: []string{},
		Keys:      rot,
	}
	files := map[string][]byte{}
	for _, pub := range rot.Add {
		id, _ := manifests.KeyID(pub)
		text, _ := manifests.KeyFile(pub)
		sum := sha256.Sum256(text)
		p := manifests.KeyPath(id)
		files[p] = text
		m.Entries = append(m.Entries, manifests.Entry{Path: p, Type: manifests.TypeFile, Mode: 0o644, Size: int64(len(text)), SHA256: hex.EncodeToString(sum[:])})
	}
	slices.SortFunc(m.Entries, func(a, b manifests.Entry) int { return strings.Compare(a.Path, b.Path) })
	for _, id := range rot.Revoke {
		m.Deletes = append(m.Deletes, manifests.KeyPath(id))
	}
	slices.Sort(m.Deletes)
	// The keys live under /usr: a line whose image does not let overlays
	// change /usr cannot rotate them on live nodes.
	if err := checkHierarchies(c.Image.Manifest.Managed(), m.Entries, m.Deletes); err != nil {
		return nil, fmt.Errorf("rotating keys of line %s: %w; a line that does not manage /usr rotates keys with a new image", c.Line.Name, err)
	}
	next, err := c.State.Apply(m.Entries, m.Deletes)
	if err != nil {
		return nil, fmt.Errorf("rotating keys of line %s: %w", c.Line.Name, err)
	}
	m.TreeDigest = next.Digest()
	created := o.Created
	if created.IsZero() {
		created = time.Now()
	}
	m.Created = created.UTC().Truncate(time.Second).Format(time.RFC3339)
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("rotating keys of line %s: %w", c.Line.Name, err)
	}
	after, err := c.Keys.After(m)
	if err != nil {
		return nil, err
	}
	indexKey := o.IndexKey
	if indexKey == nil {
		indexKey = key
	}
	if !after.HasKey(indexKey) {
		what := "--index-key"
		if o.IndexKey == nil {
			what = "--key"
		}
		return nil, fmt.Errorf("rotating keys of line %s: the index must be signed by a key trusted after the rotation (%s), and %s %s is not; name one with --index-key: %w", c.Line.Name, strings.Join(after.IDs(), ", "), what, indexKey.ID(), ErrRotation)
	}
	open := func(e manifests.Entry) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(files[e.Path])), nil
	}
	return publish(ctx, r, c, m, open, open, compress.Zstd, key, indexKey, next)
}

// rotation checks what o asks for against the keys the line trusts at
// its head: every added key new, every revoked key trusted, some key left.
func rotation(c *Chain, o RotateOptions) (*manifests.Rotation, error) {
	rot := &manifests.Rotation{Add: []string{}, Revoke: []string{}}
	fail := func(format string, a ...any) error {
		return fmt.Errorf("rotating keys of line %s: %s: %w", c.Line.Name, fmt.Sprintf(format, a...), ErrRotation)
	}
	if len(o.Add)+len(o.Revoke) == 0 {
		return nil, fail("nothing to do; name keys with --add and --revoke")
	}
	for _, text := range o.Add {
		ks, err := sign.NewKeySet(text)
		if err != nil {
			return nil, fail("--add: %v (a public key, the .pub file key generate writes)", err)
		}
		pub, id := ks.Strings()[0], ks.IDs()[0]
		if c.Keys.Has(id) {
			return nil, fail("--add: key %s is trusted already", id)
		}
		if slices.Contains(rot.Add, pub) {
			return nil, fail("--add: key %s named twice", id)
		}
		rot.Add = append(rot.Add, pub)
	}
	for _, id := range o.Revoke {
		id = strings.ToUpper(id)
		if !c.Keys.Has(id) {
			return nil, fail("--revoke: key %s is not one the line trusts (trusted: %s)", id, strings.Join(c.Keys.IDs(), ", "))
		}
		if slices.Contains(rot.Revoke, id) {
			return nil, fail("--revoke: key %s named twice", id)
		}
		rot.Revoke = append(rot.Revoke, id)
	}
	if c.Keys.Len()+len(rot.Add)-len(rot.Revoke) == 0 {
		return nil, fail("no key would be left to trust")
	}
	return rot, nil
}
