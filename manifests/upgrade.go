package manifests

import (
	"fmt"
	"regexp"
	"time"
)

// The root partitions of a disk node (see builder/disk's layout).
const (
	SlotA = "a"
	SlotB = "b"
)

// KindUpgrade tags a staged upgrade.
const KindUpgrade = "upgrade"

// UpgradePath is where a node keeps its staged upgrade.
const UpgradePath = StateDir + "/upgrade.json"

// BootRefusalPath is where a disk node's initramfs leaves, in one line of
// text, why it refused to boot a root (dm-verity refused its blocks): the
// next boot's activation adds it to the failed upgrade it records.
const BootRefusalPath = StateDir + "/boot-refused"

// The unit that confirms a trial boot of an upgrade (strata upgrade
// --confirm), and its link into boot-complete.target: an image an
// upgrade switches to must have both (builder bakes them in with
// strata), or a trial boot would be blessed without its health check.
const (
	ConfirmUnit     = "strata-upgrade-confirm.service"
	ConfirmUnitPath = "usr/lib/systemd/system/" + ConfirmUnit
	ConfirmUnitLink = "etc/systemd/system/boot-complete.target.requires/" + ConfirmUnit
)

// StagedUpgrade is a whole-image upgrade written to a node's inactive root
// partition and waiting for its first healthy boot there. The ledger gets
// Record (with its sequence, time and hashes) only then: until it does,
// the node's image is the one its ledger names, and a boot that falls
// back to it leaves a failed record instead.
type StagedUpgrade struct {
	Schema int    `json:"schema"`
	Kind   string `json:"kind"`
	// Record is the upgrade record to commit (Seq, Time, Prev and Hash
	// unset).
	Record LedgerEntry `json:"record"`
	// From is the image the node ran when the upgrade was staged.
	From Ref `json:"from"`
	// Entry is the boot loader entry that boots it (its id, without the
	// boot counter).
	Entry string `json:"entry"`
	// BootID is the kernel's boot id when it was staged on a running
	// node (empty: staged offline, on a disk).
	BootID string `json:"boot_id,omitempty"`
	// Staged is when (RFC 3339, UTC).
	Staged string `json:"staged"`
}

var (
	bootIDRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	// EntryIDRe matches the boot loader entries strata writes:
	// strata-GENERATION-SLOT.conf, or strata-GENERATION-SLOT.efi for a
	// unified kernel image (Secure Boot).
	EntryIDRe = regexp.MustCompile(`^strata-([1-9][0-9]{0,8})-([ab])\.(?:conf|efi)$`)
)

// ValidBootID reports whether s has the form of a kernel boot id
// (/proc/sys/kernel/random/boot_id).
func ValidBootID(s string) bool { return bootIDRe.MatchString(s) }

// Validate checks every field of a staged upgrade: it is node state, and
// node state may have been planted.
func (u *StagedUpgrade) Validate() error {
	if u.Schema != Schema || u.Kind != KindUpgrade {
		return fmt.Errorf("%w: not a staged upgrade (schema %d, kind %q)", ErrInvalid, u.Schema, u.Kind)
	}
	if u.Record.Action != LedgerUpgrade {
		return fmt.Errorf("%w: staged upgrade: record action %q", ErrInvalid, u.Record.Action)
	}
	if err := u.Record.validate(); err != nil {
		return fmt.Errorf("%w: staged upgrade: %v", ErrInvalid, err)
	}
	if _, err := ParseVersion(u.From.Version); err != nil || !ValidDigest(u.From.Digest) {
		return fmt.Errorf("%w: staged upgrade: from %s (%s)", ErrInvalid, u.From.Version, u.From.Digest)
	}
	m := EntryIDRe.FindStringSubmatch(u.Entry)
	if m == nil || m[2] != u.Record.Slot {
		return fmt.Errorf("%w: staged upgrade: boot entry %q is not strata-N-%s.conf or .efi", ErrInvalid, u.Entry, u.Record.Slot)
	}
	if u.BootID != "" && !ValidBootID(u.BootID) {
		return fmt.Errorf("%w: staged upgrade: boot id %q", ErrInvalid, u.BootID)
	}
	if _, err := time.Parse(time.RFC3339, u.Staged); err != nil {
		return fmt.Errorf("%w: staged upgrade: time %q", ErrInvalid, u.Staged)
	}
	return nil
}
