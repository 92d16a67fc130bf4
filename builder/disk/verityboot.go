package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/strata-dev/strata/internal/cpio"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
)

// A disk node's root is opened through dm-verity at boot. Every boot
// entry loads a small initrd strata writes (/strata/SLOT/verity.img on
// the ESP) before the image's own, and its command line names the
// verified device, the partition below it and the root hash:
//
//	initrd /strata/a/verity.img
//	initrd /strata/a/initrd.img
//	options root=/dev/mapper/strata-root strata.root=PARTUUID=… strata.verity=ROOTHASH …
//
// The verity initrd unpacks below /strata in the initramfs: the image's
// own strata binary, the keys the image trusts, and the image's signed
// verity record. The image's initramfs (images/debian-bootable's
// local-top script) runs `strata boot open-root`, which checks the
// record's signature with those keys and that it names the command
// line's root hash, then opens the partition as the dm-verity device
// /dev/mapper/strata-root, which root= names. The hash never comes from
// the partition it protects, and an initramfs that does not open it
// cannot mount the root: the boot fails closed.
const (
	// VerityParam is the kernel command line parameter with the root hash.
	VerityParam = manifests.VerityParam
	// VerityDevice is the device-mapper name of the verified root.
	VerityDevice = manifests.VerityRootDevice
	// verityRootParam names the partition below the verified root.
	verityRootParam = manifests.RootParam
	// VerityInitrdDir is where the verity initrd's files are in the
	// initramfs.
	VerityInitrdDir = "/strata"
	verityInitrd    = "verity.img"
)

// verityBoot is what opens one image's root through dm-verity at boot:
// its root hash and the initrd (a file in the work directory).
type verityBoot struct {
	rootHash string
	initrd   string
}

// makeVerityBoot writes the verity initrd of image into work: nil when
// the image has no verity record or no strata binary to open it with
// (the root then boots unverified, and the node's status says so). A
// record that is there and does not verify, or an image whose blocks do
// not match it, is an error: nothing is written to the disk then.
func makeVerityBoot(ctx context.Context, image string, im *repo.Image, strataFile, work string) (*verityBoot, error) {
	d, err := repo.LoadVerityDoc(image, im, nil)
	if err != nil {
		if errors.Is(err, repo.ErrNoVerity) {
			return nil, nil
		}
		return nil, err
	}
	if strataFile == "" {
		return nil, nil
	}
	if err := repo.VerifyTree(ctx, image, d.Verity); err != nil {
		return nil, err
	}
	record, sig := d.Raw, d.Sig
	bin, err := os.ReadFile(strataFile)
	if err != nil {
		return nil, fmt.Errorf("verity initrd: %w", err)
	}
	keys, err := im.Trust()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	w := cpio.NewWriter(&b)
	dir := strings.TrimPrefix(VerityInitrdDir, "/")
	errs := []error{w.Dir(dir, 0o755), w.Dir(dir+"/bin", 0o755), w.Dir(dir+"/keys", 0o755),
		w.File(dir+"/bin/strata", 0o755, bin),
		w.File(dir+"/verity.json", 0o644, record), w.File(dir+"/verity.json.minisig", 0o644, sig)}
	files := keys.Files()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		errs = append(errs, w.File(dir+"/keys/"+name, 0o644, files[name]))
	}
	errs = append(errs, w.Close())
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("verity initrd: %w", err)
		}
	}
	p := filepath.Join(work, verityInitrd)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("verity initrd: %w", err)
	}
	return &verityBoot{rootHash: d.Verity.RootHash, initrd: p}, nil
}
