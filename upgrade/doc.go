// Package upgrade replaces the whole image of a disk node: A/B root
// partitions with systemd-boot's boot counting, and compaction onto a
// regenerated image.
//
// Disk (a disk that is not running) and Live (the running node's own
// disk) verify the image against the node (node.Node.Upgrade: signed by a
// key the node trusts, of its line, newer than the image it runs, able to
// carry its layers; or, to compact, a regenerated image of the node's
// head with the node's tree), write it to the inactive root partition
// (disk.Target.Install: streamed, synced, read back and hashed), add a
// boot entry for it that systemd-boot tries DefaultTries times, and stage
// the upgrade in the node's state. The running system is untouched.
//
// At the next boot the firmware tries the new root. The initramfs's
// strata activate stacks the layers the upgrade keeps over it; once the
// system is up, strata upgrade --confirm (a unit ordered before
// boot-complete.target) checks the node's health and commits the upgrade
// to the ledger, and systemd-bless-boot marks the entry good. A boot that
// fails reboots (the confirm unit's FailureAction, panic=10 on the kernel
// command line), using up a try; with none left, systemd-boot boots the
// old root, whose activation records the upgrade as failed
// (node.Node.SettleUpgrade).
package upgrade
