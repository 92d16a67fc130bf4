package overlayfs

import "path/filepath"

// readOnlyFS are the file systems a sealed node's root may be: ones
// that have no write path at all, so what a mount of one shows changes
// only with the bytes below it.
var readOnlyFS = map[string]bool{"squashfs": true, "erofs": true}

// SealedMounts implements nodestate.Sealed. The node is sealed when its
// stacks are active, its root is a squashfs or EROFS mount, every layer
// in effect is a mounted layer image (EROFS, read-only), activation
// refused none, and each stack mounted over a managed hierarchy is
// strata's and has a layer image holding that hierarchy (not only the
// empty directory a stack keeps when its last layer goes). It returns
// the ids of the root's mount and of the stacks; nil when not sealed.
func (b *Backend) SealedMounts() (map[uint64]bool, error) {
	ms, err := mounts()
	if err != nil {
		return nil, err
	}
	if !isMountPoint(ms, b.ImageDir()) {
		return nil, nil
	}
	root, ok := topMount(ms, b.n.Root)
	if !ok || !readOnlyFS[root.FSType] {
		return nil, nil
	}
	if r, err := b.refusal(); err != nil || r != nil {
		return nil, err
	}
	l, err := b.n.ReadLedger()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, r := range refs(l.Applied()) {
		if r.Image == nil {
			return nil, nil
		}
		m, ok := b.imageMount(ms, r)
		if !ok || m.FSType != "erofs" {
			return nil, nil
		}
		dirs = append(dirs, m.Point)
	}
	ids := map[uint64]bool{uint64(root.ID): true}
	for _, h := range b.managed() {
		top, ok := topMount(ms, filepath.Join(b.n.Root, h))
		if !ok {
			continue // the image's own, on the root's mount
		}
		if top.FSType != "overlay" || top.Source != "strata" {
			return nil, nil
		}
		held := false
		for _, d := range dirs {
			if isDir(filepath.Join(d, h)) {
				held = true
				break
			}
		}
		if !held {
			return nil, nil
		}
		ids[uint64(top.ID)] = true
	}
	return ids, nil
}
