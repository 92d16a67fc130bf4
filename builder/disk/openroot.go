package disk

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/strata-dev/strata/internal/dmverity"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/verity"
	"github.com/strata-dev/strata/manifests"
)

// ErrUnverifiedRoot reports a root that cannot be opened through
// dm-verity as its boot entry asks: the boot stops rather than run an
// unverified root.
var ErrUnverifiedRoot = manifests.Rejection("the root cannot be opened verified")

// OpenRootOptions say what OpenRoot opens.
type OpenRootOptions struct {
	// Device is the root partition.
	Device string
	// RootHash is the root hash the kernel command line names
	// (strata.verity=).
	RootHash string
	// Dir holds the verity initrd's files (default VerityInitrdDir):
	// keys/*.pub, verity.json and its .minisig.
	Dir string
	// Name is the device-mapper name (default VerityDevice).
	Name string
}

// OpenedRoot is the verified root OpenRoot made.
type OpenedRoot struct {
	Device string `json:"device"`
	// Mapped is the dm-verity device to mount as the root.
	Mapped string `json:"mapped"`
	// Verity is the signed record the root was opened with; KeyID the
	// key that signed it.
	Verity *manifests.Verity `json:"verity"`
	KeyID  string            `json:"key_id"`
}

// CheckRootRecord verifies the verity record in dir against the keys in
// dir/keys and the root hash the command line names: the record must be
// valid, signed by one of the keys for its own line and version, and
// carry exactly that root hash.
func CheckRootRecord(dir, rootHash string) (*manifests.Verity, string, error) {
	keys := &sign.KeySet{}
	ents, err := os.ReadDir(filepath.Join(dir, "keys"))
	if err != nil {
		return nil, "", fmt.Errorf("%w: the keys to check the root hash with: %v", ErrUnverifiedRoot, err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".pub") {
			continue
		}
		if err := keys.Merge(sign.LoadPublicFile(filepath.Join(dir, "keys", e.Name()))); err != nil {
			return nil, "", fmt.Errorf("%w: %v", ErrUnverifiedRoot, err)
		}
	}
	if keys.Len() == 0 {
		return nil, "", fmt.Errorf("%w: no key in %s to check the root hash with", ErrUnverifiedRoot, filepath.Join(dir, "keys"))
	}
	rp := filepath.Join(dir, "verity.json")
	raw, err := safefile.Read(rp, manifests.MaxManifestSize)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrUnverifiedRoot, err)
	}
	sig, err := safefile.Read(rp+".minisig", sign.MaxSignatureSize)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrUnverifiedRoot, err)
	}
	var v manifests.Verity
	if err := manifests.Decode(raw, &v); err != nil {
		return nil, "", fmt.Errorf("%w: %s: %v", ErrUnverifiedRoot, rp, err)
	}
	if err := v.Validate(); err != nil {
		return nil, "", fmt.Errorf("%w: %s: %v", ErrUnverifiedRoot, rp, err)
	}
	id, err := keys.VerifyFor(raw, sig, sign.VerityComment(v.Line, v.Version))
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s: %v", ErrUnverifiedRoot, rp, err)
	}
	if rootHash != v.RootHash {
		return nil, "", fmt.Errorf("%w: the command line's root hash %q is not the signed one of %s-%s (%s)", ErrUnverifiedRoot, rootHash, v.Line, v.Version, v.RootHash)
	}
	return &v, id, nil
}

// OpenRoot opens the root partition as a dm-verity device, once
// CheckRootRecord accepts its record and the partition is large enough
// for the data and tree the record names. The kernel then checks every
// block read against the signed root hash: a changed block reads as an
// I/O error. It runs veritysetup, which must be in the initramfs.
func OpenRoot(ctx context.Context, o OpenRootOptions) (*OpenedRoot, error) {
	if o.Dir == "" {
		o.Dir = VerityInitrdDir
	}
	if o.Name == "" {
		o.Name = VerityDevice
	}
	v, id, err := CheckRootRecord(o.Dir, o.RootHash)
	if err != nil {
		return nil, err
	}
	p, root, err := verity.FromRecord(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnverifiedRoot, err)
	}
	size, err := deviceSize(o.Device)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnverifiedRoot, err)
	}
	if need := v.HashOffset + p.TreeSize(); size < need {
		return nil, fmt.Errorf("%w: %s holds %d bytes; image %s-%s with its hash tree needs %d", ErrUnverifiedRoot, o.Device, size, v.Line, v.Version, need)
	}
	dev, err := dmverity.Open(ctx, dmverity.Target{Device: o.Device, Params: p, Root: root}, o.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnverifiedRoot, err)
	}
	return &OpenedRoot{Device: o.Device, Mapped: dev, Verity: v, KeyID: id}, nil
}

// deviceSize is the size of a block device or a regular file.
func deviceSize(p string) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if fi.Mode().IsRegular() {
		return fi.Size(), nil
	}
	if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return 0, fmt.Errorf("%s is not a block device (%s)", p, safefile.TypeName(fi.Mode()))
	}
	n, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("%s: size: %w", p, err)
	}
	return n, nil
}
