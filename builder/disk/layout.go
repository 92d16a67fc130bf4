package disk

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"

	"github.com/diskfs/go-diskfs/partition/gpt"
)

// The disk layout Provision writes, in order on a GPT disk with
// 512-byte sectors, every partition aligned to 1 MiB:
//
//	1  esp    EFI System, FAT32, ESPSize: systemd-boot, loader entry, kernel, initrd
//	2  rootA  Linux root (x86-64): the squashfs image, byte for byte
//	3  rootB  Linux root (x86-64): same size as rootA, empty (next full image)
//	4  state  Linux filesystem, ext4: /var, the node identity, the ledger
//
// Each root partition is RootSize(image size): twice the image rounded up
// to a MiB, at least MinRootSize, so a later, larger image still fits. The
// state partition takes the rest of the disk and must be at least
// MinStateSize; without a size the disk is made with DefaultStateSize of
// state. The first MiB holds the protective MBR and the primary GPT; the
// last MiB the backup GPT.
const (
	MiB              = int64(1) << 20
	ESPSize          = 256 * MiB
	MinRootSize      = 64 * MiB
	MinStateSize     = 64 * MiB
	DefaultStateSize = 1024 * MiB
	sectorSize       = 512
	gptReserve       = MiB // before the first and after the last partition
)

// GPT partition type GUIDs (Discoverable Partitions Specification).
const (
	TypeESP       = gpt.EFISystemPartition
	TypeRootX8664 = gpt.LinuxRootX86_64
	TypeLinuxData = gpt.LinuxFilesystem
)

// Partition indexes (1-based, as in the GPT) and names.
const (
	PartESP   = 1
	PartRootA = 2
	PartRootB = 3
	PartState = 4
)

var partNames = [...]string{PartESP: "esp", PartRootA: "rootA", PartRootB: "rootB", PartState: "state"}

// Layout is where each partition lies, in bytes.
type Layout struct {
	Size       int64       `json:"size"`
	DiskGUID   string      `json:"disk_guid"`
	Partitions []Partition `json:"partitions"`
}

// Part returns partition i (PartESP ... PartState).
func (l *Layout) Part(i int) Partition { return l.Partitions[i-1] }

// Partition is one partition of a Layout.
type Partition struct {
	Index  int    `json:"index"`
	Name   string `json:"name"`
	Type   string `json:"type"`
	GUID   string `json:"guid"`
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
}

// RootSize is the size of each root partition for an image of n bytes.
func RootSize(n int64) int64 { return max(roundMiB(2*n), MinRootSize) }

// MinSize is the smallest disk that holds the layout for an image of
// n bytes.
func MinSize(n int64) int64 {
	return gptReserve + ESPSize + 2*RootSize(n) + MinStateSize + gptReserve
}

func roundMiB(n int64) int64 { return (n + MiB - 1) / MiB * MiB }

// planLayout lays the partitions out on a disk of size bytes (rounded down
// to a MiB) for an image of imageSize bytes, with GUIDs derived from
// imageDigest and nodeID. size 0 means the minimum plus DefaultStateSize.
func planLayout(size, imageSize int64, imageDigest, nodeID string) (*Layout, error) {
	if size == 0 {
		size = MinSize(imageSize) - MinStateSize + DefaultStateSize
	}
	size = size / MiB * MiB
	if need := MinSize(imageSize); size < need {
		return nil, fmt.Errorf("disk of %s is too small: the layout needs at least %s (ESP %s, 2 roots of %s, state %s, GPT %s): %w",
			FormatSize(size), FormatSize(need), FormatSize(ESPSize), FormatSize(RootSize(imageSize)), FormatSize(MinStateSize), FormatSize(2*gptReserve), ErrTooSmall)
	}
	l := &Layout{Size: size, DiskGUID: GUID(imageDigest, nodeID, "disk")}
	root := RootSize(imageSize)
	sizes := [5]int64{PartESP: ESPSize, PartRootA: root, PartRootB: root}
	sizes[PartState] = size - gptReserve - ESPSize - 2*root - gptReserve
	types := [5]gpt.Type{PartESP: TypeESP, PartRootA: TypeRootX8664, PartRootB: TypeRootX8664, PartState: TypeLinuxData}
	off := gptReserve
	for i := PartESP; i <= PartState; i++ {
		l.Partitions = append(l.Partitions, Partition{Index: i, Name: partNames[i], Type: string(types[i]),
			GUID: GUID(imageDigest, nodeID, partNames[i]), Offset: off, Size: sizes[i]})
		off += sizes[i]
	}
	return l, nil
}

// table is the GPT of the layout.
func (l *Layout) table() *gpt.Table {
	t := &gpt.Table{LogicalSectorSize: sectorSize, PhysicalSectorSize: sectorSize, ProtectiveMBR: true, GUID: l.DiskGUID}
	for _, p := range l.Partitions {
		t.Partitions = append(t.Partitions, &gpt.Partition{
			Index: p.Index, Start: uint64(p.Offset / sectorSize), End: uint64((p.Offset+p.Size)/sectorSize - 1),
			Size: uint64(p.Size), Type: gpt.Type(p.Type), Name: p.Name, GUID: p.GUID,
		})
	}
	return t
}

// DiskGUID derives a GUID for role ("disk", "esp", "rootA", ...) from the
// image digest and the node id: the first 16 bytes of
// sha256("strata-disk\x00" digest "\x00" node "\x00" role), stamped as an
// RFC 9562 version 8 (custom) UUID. The same image and node always get the
// same GUIDs; different nodes or images get different ones.
func GUID(imageDigest, nodeID, role string) string {
	h := sha256.Sum256([]byte("strata-disk\x00" + imageDigest + "\x00" + nodeID + "\x00" + role))
	b := h[:16]
	b[6] = b[6]&0x0f | 0x80
	b[8] = b[8]&0x3f | 0x80
	return strings.ToUpper(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
}

// ParseSize reads a size like "4G", "512M", "1T", "65536K" (powers of
// 1024; an optional trailing "iB" or "B" is allowed) or a plain number of
// bytes.
func ParseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		if i := strings.IndexByte("KMGT", t[n-1]); i >= 0 {
			mult = int64(1) << (10 * (i + 1))
			t = t[:n-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q: want a positive number with an optional K, M, G or T suffix", s)
	}
	return n * mult, nil
}

// FormatSize prints n bytes in the largest whole binary unit.
func FormatSize(n int64) string {
	for _, u := range []struct {
		s string
		b int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.b && n%u.b == 0 {
			return fmt.Sprintf("%d%siB", n/u.b, u.s)
		}
	}
	if n >= MiB {
		return fmt.Sprintf("%.1fMiB", float64(n)/float64(MiB))
	}
	return fmt.Sprintf("%d bytes", n)
}
