// Package offline applies overlays to, and audits, a node disk that is not
// running: the disk's partitions are mounted the way its initramfs mounts
// them (builder/disk), the node is activated (node.Node.Activate), and the
// usual apply and audit run on it. Restarts are recorded as pending.
package offline
