package erofs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/strata-dev/strata/internal/ctxio"
)

// BlockSize is the block size of every image (the page size the kernel
// needs).
const BlockSize = 4096

// Magic is EROFS's superblock magic, at byte SuperOffset.
const (
	Magic       = 0xE0F5E1E2
	SuperOffset = 1024
)

// ErrInvalid reports a tree the format cannot hold or a node list that is
// not a tree.
var ErrInvalid = errors.New("erofs: invalid tree")

// Type is the kind of a node.
type Type uint8

// The node types a layer holds.
const (
	Dir Type = iota + 1
	File
	Symlink
	// Whiteout is overlayfs's mark of a deleted path: a character
	// device 0:0.
	Whiteout
)

// Node is one path of the tree to write. The root directory is implied
// (mode 0755, owned by 0:0); every other directory on a node's path must
// be a node of its own.
type Node struct {
	// Path is slash-separated and relative ("etc/app.conf").
	Path string
	Type Type
	// Mode is the permission and special bits (07777).
	Mode     uint32
	UID, GID uint32
	// Size is a File's length in bytes.
	Size int64
	// Target is a Symlink's target.
	Target string
	// Opaque marks a Dir that hides what the layers below hold there
	// (trusted.overlay.opaque=y).
	Opaque bool
}

// Image is a planned image: where every inode and every file's data
// goes.
type Image struct {
	inodes  []*inode // in nid order, the root first
	byPath  map[string]*inode
	blocks  int64
	written map[string]bool
}

type inode struct {
	Node
	name     string
	children []*inode
	parent   *inode
	nid      uint64
	ino      uint32
	blkaddr  uint32
	nblocks  int64
	size     int64 // i_size
	dirents  [][]dirent
	xattrLen int
}

type dirent struct {
	name string
	nid  uint64
	ft   uint8
}

// The on-disk constants this writer uses.
const (
	inodeSize      = 64 // extended inode
	slotSize       = 32 // nid unit
	direntSize     = 12
	xattrHeader    = 12
	xattrTrusted   = 4
	maxName        = 255
	maxSymlink     = BlockSize - 1
	metaBlock      = 1 // the metadata area's first block
	ftReg, ftDir   = 1, 2
	ftChr, ftLnk   = 3, 7
	sIFDIR, sIFREG = 0o040000, 0o100000
	sIFLNK, sIFCHR = 0o120000, 0o020000
)

// opaqueName is the opaque xattr's name after the "trusted." prefix.
const opaqueName = "overlay.opaque"

// Plan lays out an image of nodes: every path's parent must be a Dir
// node (or the root), no path twice. The layout depends only on the
// nodes, not on their order.
func Plan(nodes []Node) (*Image, error) {
	root := &inode{Node: Node{Type: Dir, Mode: 0o755}}
	im := &Image{byPath: map[string]*inode{"": root}, written: map[string]bool{}}
	sorted := append([]Node(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, n := range sorted {
		if err := validNode(n); err != nil {
			return nil, err
		}
		if _, dup := im.byPath[n.Path]; dup {
			return nil, fmt.Errorf("%w: %s given twice", ErrInvalid, n.Path)
		}
		im.byPath[n.Path] = &inode{Node: n, name: n.Path[strings.LastIndexByte(n.Path, '/')+1:]}
	}
	// Link children to parents once every node is known (a parent
	// sorts before its children, but not every parent is given).
	for _, n := range sorted {
		in := im.byPath[n.Path]
		dir := ""
		if i := strings.LastIndexByte(n.Path, '/'); i >= 0 {
			dir = n.Path[:i]
		}
		p, ok := im.byPath[dir]
		if !ok || p.Type != Dir {
			return nil, fmt.Errorf("%w: %s: parent %q is not a directory of the tree", ErrInvalid, n.Path, dir)
		}
		in.parent = p
		p.children = append(p.children, in)
	}
	root.parent = root
	im.order(root)
	if err := im.layout(); err != nil {
		return nil, err
	}
	return im, nil
}

func validNode(n Node) error {
	if n.Path == "" || strings.HasPrefix(n.Path, "/") || strings.HasSuffix(n.Path, "/") || strings.Contains(n.Path, "\x00") {
		return fmt.Errorf("%w: path %q", ErrInvalid, n.Path)
	}
	for _, part := range strings.Split(n.Path, "/") {
		if part == "" || part == "." || part == ".." || len(part) > maxName {
			return fmt.Errorf("%w: path %q", ErrInvalid, n.Path)
		}
	}
	if n.Mode > 0o7777 {
		return fmt.Errorf("%w: %s: mode %o", ErrInvalid, n.Path, n.Mode)
	}
	switch n.Type {
	case Dir, Whiteout:
	case File:
		if n.Size < 0 || n.Size > (1<<32-1)*BlockSize {
			return fmt.Errorf("%w: %s: size %d", ErrInvalid, n.Path, n.Size)
		}
	case Symlink:
		if n.Target == "" || len(n.Target) > maxSymlink || strings.Contains(n.Target, "\x00") {
			return fmt.Errorf("%w: %s: symlink target of %d bytes", ErrInvalid, n.Path, len(n.Target))
		}
	default:
		return fmt.Errorf("%w: %s: type %d", ErrInvalid, n.Path, n.Type)
	}
	if n.Opaque && n.Type != Dir {
		return fmt.Errorf("%w: %s: only a directory can be opaque", ErrInvalid, n.Path)
	}
	return nil
}

// order lists the inodes depth first, children by name.
func (im *Image) order(in *inode) {
	im.inodes = append(im.inodes, in)
	sort.Slice(in.children, func(i, j int) bool { return in.children[i].name < in.children[j].name })
	for _, c := range in.children {
		im.order(c)
	}
}

// layout places every inode in the metadata area and every extent after
// it.
func (im *Image) layout() error {
	var off int64 // within the metadata area
	for i, in := range im.inodes {
		if in.Opaque {
			in.xattrLen = xattrHeader + align4(4+len(opaqueName)+1)
		}
		size := int64(inodeSize + in.xattrLen)
		if off/BlockSize != (off+size-1)/BlockSize {
			off = (off/BlockSize + 1) * BlockSize // an inode never spans blocks
		}
		in.nid = uint64(off / slotSize)
		in.ino = uint32(i + 1)
		off += (size + slotSize - 1) / slotSize * slotSize
	}
	if im.inodes[0].nid != 0 {
		return fmt.Errorf("%w: root inode not first", ErrInvalid)
	}
	next := int64(metaBlock) + (off+BlockSize-1)/BlockSize
	for _, in := range im.inodes {
		switch in.Type {
		case Dir:
			in.packDir()
			in.nblocks = int64(len(in.dirents))
		case File:
			in.size = in.Size
			in.nblocks = (in.Size + BlockSize - 1) / BlockSize
		case Symlink:
			in.size = int64(len(in.Target))
			in.nblocks = 1
		}
		if in.nblocks > 0 {
			if next+in.nblocks > 1<<32-1 {
				return fmt.Errorf("%w: image over %d blocks", ErrInvalid, int64(1<<32-1))
			}
			in.blkaddr = uint32(next)
			next += in.nblocks
		}
	}
	im.blocks = next
	return nil
}

func align4(n int) int { return (n + 3) &^ 3 }

// packDir fills the directory's blocks with its entries, "." and ".."
// included, in name order across all blocks, and sets its size.
func (in *inode) packDir() {
	ents := []dirent{{name: ".", nid: in.nid, ft: ftDir}, {name: "..", nid: in.parent.nid, ft: ftDir}}
	for _, c := range in.children {
		ents = append(ents, dirent{name: c.name, nid: c.nid, ft: c.fileType()})
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].name < ents[j].name })
	var block []dirent
	used := 0
	for _, e := range ents {
		need := direntSize + len(e.name)
		if used+need > BlockSize {
			in.dirents = append(in.dirents, block)
			block, used = nil, 0
		}
		block = append(block, e)
		used += need
	}
	in.dirents = append(in.dirents, block)
	in.size = int64(len(in.dirents)-1)*BlockSize + int64(used)
}

func (in *inode) fileType() uint8 {
	switch in.Type {
	case Dir:
		return ftDir
	case File:
		return ftReg
	case Symlink:
		return ftLnk
	}
	return ftChr
}

func (in *inode) mode() uint16 {
	switch in.Type {
	case Dir:
		return uint16(sIFDIR | in.Mode)
	case File:
		return uint16(sIFREG | in.Mode)
	case Symlink:
		return uint16(sIFLNK | in.Mode)
	}
	return uint16(sIFCHR | in.Mode)
}

func (in *inode) nlink() uint32 {
	if in.Type != Dir {
		return 1
	}
	n := uint32(2)
	for _, c := range in.children {
		if c.Type == Dir {
			n++
		}
	}
	return n
}

// Size is the image's length in bytes, a whole number of blocks.
func (im *Image) Size() int64 { return im.blocks * BlockSize }

// Blocks is the image's length in blocks.
func (im *Image) Blocks() int64 { return im.blocks }

// WriteMeta writes everything but the files' content into w, which must
// read as zeros where nothing is written (a new file truncated to
// Size()): the superblock, the inodes, the directories and the symbolic
// links.
func (im *Image) WriteMeta(w io.WriterAt) error {
	sb := make([]byte, 128)
	le := binary.LittleEndian
	le.PutUint32(sb[0:], Magic)
	sb[12] = 12 // blkszbits
	le.PutUint16(sb[14:], uint16(im.inodes[0].nid))
	le.PutUint64(sb[16:], uint64(len(im.inodes)))
	le.PutUint32(sb[36:], uint32(im.blocks))
	le.PutUint32(sb[40:], metaBlock)
	if _, err := w.WriteAt(sb, SuperOffset); err != nil {
		return fmt.Errorf("writing the superblock: %w", err)
	}
	for _, in := range im.inodes {
		if _, err := w.WriteAt(in.encode(), metaBlock*BlockSize+int64(in.nid)*slotSize); err != nil {
			return fmt.Errorf("writing the inode of /%s: %w", in.Path, err)
		}
		var err error
		switch in.Type {
		case Dir:
			err = in.writeDir(w)
		case Symlink:
			_, err = w.WriteAt([]byte(in.Target), int64(in.blkaddr)*BlockSize)
		}
		if err != nil {
			return fmt.Errorf("writing /%s: %w", in.Path, err)
		}
	}
	return nil
}

func (in *inode) encode() []byte {
	le := binary.LittleEndian
	b := make([]byte, inodeSize+in.xattrLen)
	le.PutUint16(b[0:], 1) // extended, FLAT_PLAIN
	if in.xattrLen > 0 {
		le.PutUint16(b[2:], uint16((in.xattrLen-xattrHeader)/4+1))
	}
	le.PutUint16(b[4:], in.mode())
	le.PutUint64(b[8:], uint64(in.size))
	if in.Type != Whiteout {
		le.PutUint32(b[16:], in.blkaddr) // a whiteout's rdev is 0:0
	}
	le.PutUint32(b[20:], in.ino)
	le.PutUint32(b[24:], in.UID)
	le.PutUint32(b[28:], in.GID)
	le.PutUint32(b[44:], in.nlink())
	if in.Opaque {
		x := b[inodeSize+xattrHeader:]
		x[0] = byte(len(opaqueName))
		x[1] = xattrTrusted
		le.PutUint16(x[2:], 1)
		copy(x[4:], opaqueName)
		x[4+len(opaqueName)] = 'y'
	}
	return b
}

func (in *inode) writeDir(w io.WriterAt) error {
	le := binary.LittleEndian
	for i, ents := range in.dirents {
		b := make([]byte, BlockSize)
		nameoff := direntSize * len(ents)
		for j, e := range ents {
			d := b[j*direntSize:]
			le.PutUint64(d[0:], e.nid)
			le.PutUint16(d[8:], uint16(nameoff))
			d[10] = e.ft
			nameoff += copy(b[nameoff:], e.name)
		}
		if i == len(in.dirents)-1 {
			b = b[:nameoff]
		}
		if _, err := w.WriteAt(b, (int64(in.blkaddr)+int64(i))*BlockSize); err != nil {
			return err
		}
	}
	return nil
}

// WriteFile copies the content of the File node at path from r into its
// extent in w: exactly its Size bytes, refusing a reader that ends early
// or has more.
func (im *Image) WriteFile(w io.WriterAt, path string, r io.Reader) error {
	in, ok := im.byPath[path]
	if !ok || in.Type != File {
		return fmt.Errorf("%w: %s is not a file of the image", ErrInvalid, path)
	}
	ow := io.NewOffsetWriter(w, int64(in.blkaddr)*BlockSize)
	n, err := ctxio.Copy(ow, io.LimitReader(r, in.Size))
	if err != nil {
		return fmt.Errorf("writing /%s: %w", path, err)
	}
	if n < in.Size {
		return fmt.Errorf("%w: %s: content of %d bytes, its size is %d", ErrInvalid, path, n, in.Size)
	}
	var one [1]byte
	if m, _ := io.ReadFull(r, one[:]); m > 0 {
		return fmt.Errorf("%w: %s: content longer than its size %d", ErrInvalid, path, in.Size)
	}
	im.written[path] = true
	return nil
}

// Unwritten lists the files with content that WriteFile has not written
// yet, in path order.
func (im *Image) Unwritten() []string {
	var out []string
	for _, in := range im.inodes {
		if in.Type == File && in.Size > 0 && !im.written[in.Path] {
			out = append(out, in.Path)
		}
	}
	return out
}
