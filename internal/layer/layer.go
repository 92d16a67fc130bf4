package layer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/strata-dev/strata/internal/ctxio"
	"github.com/strata-dev/strata/internal/erofs"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/internal/verity"
	"github.com/strata-dev/strata/manifests"
)

// ErrParent reports an overlay entry whose parent is not a directory in
// the tree after the overlay.
var ErrParent = fmt.Errorf("layer: parent is not a directory in the tree after the overlay: %w", manifests.ErrInvalid)

// Nodes lists the layer of overlay m, parents before children: every
// entry with its owner and mode, every parent directory with the owner
// and mode after (the tree after the overlay) gives it (the topmost layer
// holding a directory decides how the stack shows it), every deleted path
// as a whiteout, and a directory that replaces a deleted one as opaque.
func Nodes(m *manifests.OverlayManifest, after tree.State) ([]erofs.Node, error) {
	p := &plan{after: after, deleted: map[string]bool{}, nodes: map[string]erofs.Node{}}
	for _, d := range m.Deletes {
		p.deleted[d] = true
	}
	for _, e := range m.Entries {
		if err := p.parents(e.Path); err != nil {
			return nil, err
		}
		n, err := node(e)
		if err != nil {
			return nil, err
		}
		n.Opaque = n.Type == erofs.Dir && p.deleted[e.Path]
		p.nodes[e.Path] = n
	}
	deletes := append([]string{}, m.Deletes...)
	sort.Strings(deletes)
	for _, d := range deletes {
		if _, made := p.nodes[d]; made || p.underDeleted(d) {
			continue // re-created (opaque) or inside a deleted directory
		}
		if err := p.parents(d); err != nil {
			return nil, err
		}
		p.nodes[d] = erofs.Node{Path: d, Type: erofs.Whiteout}
	}
	out := make([]erofs.Node, 0, len(p.nodes))
	for _, n := range p.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

type plan struct {
	after   tree.State
	deleted map[string]bool
	nodes   map[string]erofs.Node
}

// underDeleted reports whether a parent of path is itself deleted and
// not made again.
func (p *plan) underDeleted(path string) bool {
	for d := manifests.Parent(path); d != ""; d = manifests.Parent(d) {
		if _, made := p.nodes[d]; p.deleted[d] && !made {
			return true
		}
	}
	return false
}

// parents adds the missing parent directories of path.
func (p *plan) parents(path string) error {
	for d := manifests.Parent(path); d != ""; d = manifests.Parent(d) {
		if _, made := p.nodes[d]; made {
			return nil
		}
		e, ok := p.after[d]
		if !ok || e.Type != manifests.TypeDir {
			return fmt.Errorf("%w: %s, parent of %s", ErrParent, d, path)
		}
		n, err := node(e)
		if err != nil {
			return err
		}
		n.Opaque = p.deleted[d]
		p.nodes[d] = n
	}
	return nil
}

// node is the layer node of a tree entry. A symbolic link's mode is
// 0777, as on any file system.
func node(e manifests.Entry) (erofs.Node, error) {
	n := erofs.Node{Path: e.Path, Mode: uint32(e.Mode) & 0o7777, UID: uint32(e.UID), GID: uint32(e.GID), Size: e.Size, Target: e.Target}
	switch e.Type {
	case manifests.TypeDir:
		n.Type = erofs.Dir
	case manifests.TypeFile:
		n.Type = erofs.File
	case manifests.TypeSymlink:
		n.Type, n.Mode = erofs.Symlink, 0o777
	default:
		return n, fmt.Errorf("layer: %s: type %q: %w", e.Path, e.Type, tree.ErrSpecialFile)
	}
	return n, nil
}

// Salt is the salt of the hash tree of overlay m's layer image: derived
// from what the manifest says before it is signed (line, version, tree
// digest), so the publisher and every node compute the same tree.
func Salt(m *manifests.OverlayManifest) []byte {
	s := sha256.Sum256([]byte("strata layer salt\x00" + m.Line + "\x00" + m.Version + "\x00" + m.TreeDigest))
	return s[:]
}

// Payload streams an overlay's file contents, in any order, each with
// its entry (what nodestate.Change.Payload and the publisher's files
// give).
type Payload func(ctx context.Context, fn func(manifests.Entry, io.Reader) error) error

// Write writes the layer image of overlay m (the tree after it, after;
// its file contents from payload) to f, an empty file open for reading
// and writing: the EROFS image, then its dm-verity tree, and returns the
// record of it. It does not sync f: a node's image must be synced by its
// caller, a publisher's is only measured.
func Write(ctx context.Context, f *os.File, m *manifests.OverlayManifest, after tree.State, payload Payload) (*manifests.LayerImage, error) {
	nodes, err := Nodes(m, after)
	if err != nil {
		return nil, err
	}
	im, err := erofs.Plan(nodes)
	if err != nil {
		return nil, fmt.Errorf("writing layer image %s: %w", f.Name(), err)
	}
	if err := f.Truncate(im.Size()); err != nil {
		return nil, fmt.Errorf("writing layer image %s: %w", f.Name(), err)
	}
	if err := im.WriteMeta(f); err != nil {
		return nil, fmt.Errorf("writing layer image %s: %w", f.Name(), err)
	}
	err = payload(ctx, func(e manifests.Entry, r io.Reader) error {
		if e.Type != manifests.TypeFile {
			return nil
		}
		return im.WriteFile(f, e.Path, r)
	})
	if err != nil {
		return nil, err
	}
	if u := im.Unwritten(); len(u) > 0 {
		return nil, fmt.Errorf("writing layer image %s: the payload carried no content for %s: %w", f.Name(), strings.Join(u, ", "), manifests.ErrInvalid)
	}
	salt := Salt(m)
	// The image's digest is taken in the pass that reads it for the
	// tree, and must cover the file to its end.
	h := &counted{h: sha256.New()}
	t, err := verity.AppendHashing(ctx, f, salt, h)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("writing layer image %s: %w", f.Name(), err)
	}
	if fi.Size() != h.n {
		return nil, fmt.Errorf("writing layer image %s: %d bytes, %d of them hashed", f.Name(), fi.Size(), h.n)
	}
	sum, size := hex.EncodeToString(h.h.Sum(nil)), h.n
	return &manifests.LayerImage{
		Format: manifests.LayerFormatEROFS, SHA256: sum, Size: size,
		DataBlocks: im.Blocks(), Salt: hex.EncodeToString(salt), RootHash: t.RootHex(),
	}, nil
}

// counted is a hash that counts what it was given.
type counted struct {
	h hash.Hash
	n int64
}

func (c *counted) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

// Digest hashes the whole of f from its start: its SHA-256 (lower-case
// hex) and length.
func Digest(ctx context.Context, f *os.File) (string, int64, error) {
	h := sha256.New()
	n, err := ctxio.Copy(h, ctxio.NewReader(ctx, io.NewSectionReader(f, 0, 1<<62)))
	if err != nil {
		return "", 0, fmt.Errorf("hashing layer image %s: %w", f.Name(), err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// Verity returns the dm-verity parameters and root hash of the layer
// image li records (validated): the tree starts right after its
// DataBlocks data blocks.
func Verity(li *manifests.LayerImage) (verity.Params, []byte, error) {
	salt, err := hex.DecodeString(li.Salt)
	if err != nil {
		return verity.Params{}, nil, fmt.Errorf("layer image record: salt: %w", err)
	}
	root, err := hex.DecodeString(li.RootHash)
	if err != nil {
		return verity.Params{}, nil, fmt.Errorf("layer image record: root hash: %w", err)
	}
	p := verity.Params{DataBlockSize: verity.BlockSize, HashBlockSize: verity.BlockSize, DataBlocks: li.DataBlocks,
		HashOffset: li.DataBlocks * verity.BlockSize, Salt: salt}
	if err := p.Validate(); err != nil {
		return verity.Params{}, nil, fmt.Errorf("layer image record: %w", err)
	}
	return p, root, nil
}
