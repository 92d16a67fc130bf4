package nodestate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"golang.org/x/sys/unix"
)

// ErrNoIdentity reports a node without an identity key.
var ErrNoIdentity = errors.New("no identity key")

// Identity returns the node's identity key (manifests.IdentityKeyPath),
// the key its agent signs its health with. With create, a node that has
// none gets one, made once: two processes making it at the same time end
// with the same key. Without, a missing key is ErrNoIdentity.
func (n Node) Identity(create bool) (*sign.Key, error) {
	if err := n.CheckState(); err != nil {
		return nil, err
	}
	p := n.Path(manifests.IdentityKeyPath)
	k, err := readIdentity(p)
	if !errors.Is(err, os.ErrNotExist) || !create {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("node %s: %w (its agent makes one when it starts)", n.Root, ErrNoIdentity)
		}
		return k, err
	}
	k, err = sign.NewKey()
	if err != nil {
		return nil, err
	}
	text, err := k.SecretText()
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(n.StateDir(), ".identity.key.*")
	if err != nil {
		return nil, fmt.Errorf("making the identity key of %s: %w", n.Root, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(text)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("making the identity key of %s: %w", n.Root, err)
	}
	// The key never replaces one another process made first (then that
	// one is the node's), and never shows with a second hard link, which
	// a concurrent reader would refuse as tampered: a rename that does
	// not replace, else (a file system without it) a link and an unlink.
	err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, p, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		if err = os.Link(tmp, p); err == nil {
			err = os.Remove(tmp)
		}
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("making the identity key of %s: %w", n.Root, err)
	}
	if err := safefile.SyncDir(filepath.Dir(p)); err != nil {
		return nil, err
	}
	return readIdentity(p)
}

// readIdentity reads the key file at p: a regular file, reached without
// a symbolic link, bounded.
func readIdentity(p string) (*sign.Key, error) {
	b, err := safefile.Read(p, sign.MaxKeySize)
	if err != nil {
		return nil, fmt.Errorf("reading identity key: %w", err)
	}
	k, err := sign.ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("identity key %s: %w: %w", p, err, ErrBadState)
	}
	return k, nil
}
