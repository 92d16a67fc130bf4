package disk

import (
	"bytes"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/strata-dev/strata/internal/uki"
	"github.com/strata-dev/strata/manifests"
)

// Boot entries. Each root partition is booted by a Boot Loader
// Specification entry strata writes on the ESP:
//
//	/loader/entries/strata-GEN-SLOT[+LEFT[-DONE]].conf
//
// GEN grows with every upgrade, SLOT is a or b, and the optional counter
// is systemd-boot's boot assessment: an entry with LEFT tries is tried
// (LEFT goes down and DONE up at each boot, the file renamed by
// systemd-boot) until systemd-bless-boot drops the counter on a boot that
// reached boot-complete.target; one at +0 is bad. loader.conf's `default
// strata-*` picks the first matching entry in systemd-boot's order, which
// puts bad entries last and sorts the others by name, newest first: the
// newest generation that is not bad boots. A disk provisioned before
// upgrades existed has /loader/entries/strata.conf for root A.
const (
	entriesDir    = "/loader/entries"
	legacyEntry   = "strata.conf"
	loaderDefault = "default strata-*\n"
	// DefaultTries is how many boots a new image gets to reach health.
	DefaultTries = 3
	maxEntrySize = 64 << 10
)

var (
	entryFileRe = regexp.MustCompile(`^strata-([1-9][0-9]{0,8})-([ab])(?:\+([0-9]{1,4})(?:-([0-9]{1,4}))?)?\.conf$`)
	// ukiFileRe is the same name for a UKI in /EFI/Linux (Secure Boot).
	ukiFileRe = regexp.MustCompile(`^strata-([1-9][0-9]{0,8})-([ab])(?:\+([0-9]{1,4})(?:-([0-9]{1,4}))?)?\.efi$`)
)

// ukiHead is how much of a UKI readEntries reads: the headers, the stub
// and the .osrel and .cmdline sections, which uki.Build puts before the
// initrd and the kernel.
const ukiHead = uki.HeadSize

// pendingEntryRe matches an entry Install wrote under its temporary
// name, which Installed.Commit renames to make it bootable.
var pendingEntryRe = regexp.MustCompile(`^(?i:strata)-([1-9][0-9]{0,8})-([abAB])\.(?i:new)$`)

// BootEntry is one of strata's boot loader entries on a disk's ESP.
type BootEntry struct {
	// ID is the entry without its counter (strata-GEN-SLOT.conf, or
	// strata.conf on disks from before upgrades); File its name on the
	// ESP.
	ID   string `json:"id"`
	File string `json:"file"`
	// Generation orders entries (0 for strata.conf); Slot is the root
	// partition its root= names.
	Generation int    `json:"generation"`
	Slot       string `json:"slot"`
	// TriesLeft and TriesDone are the boot counter; TriesLeft is -1 when
	// the entry has none (blessed, or never counted).
	TriesLeft int    `json:"tries_left"`
	TriesDone int    `json:"tries_done"`
	Title     string `json:"title"`
	Linux     string `json:"linux"`
	Initrd    string `json:"initrd"`
	// VerityInitrd is the initrd (loaded before Initrd) that opens the
	// root through dm-verity (see VerityParam); empty when the entry
	// boots an unverified root.
	VerityInitrd string `json:"verity_initrd,omitempty"`
	Options      string `json:"options"`
	// UKI is the ESP path of the signed unified kernel image a Secure
	// Boot disk boots (a type #2 entry: Linux and Initrd are empty, and
	// Options is its .cmdline).
	UKI string `json:"uki,omitempty"`
}

// State says what the counter means: "good" (no counter), "trying" or
// "bad" (no tries left).
func (e BootEntry) State() string {
	switch {
	case e.TriesLeft < 0:
		return "good"
	case e.TriesLeft == 0:
		return "bad"
	}
	return "trying"
}

// parseEntryName reads an entry file name (re: entryFileRe or ukiFileRe).
func parseEntryName(name string, re *regexp.Regexp) (BootEntry, bool) {
	if re == entryFileRe && strings.EqualFold(name, legacyEntry) {
		return BootEntry{ID: legacyEntry, File: name, TriesLeft: -1}, true
	}
	m := re.FindStringSubmatch(name)
	if m == nil {
		return BootEntry{}, false
	}
	gen, _ := strconv.Atoi(m[1])
	e := BootEntry{ID: fmt.Sprintf("strata-%d-%s%s", gen, m[2], path.Ext(name)), File: name, Generation: gen, Slot: m[2], TriesLeft: -1}
	if m[3] != "" {
		e.TriesLeft, _ = strconv.Atoi(m[3])
	}
	if m[4] != "" {
		e.TriesDone, _ = strconv.Atoi(m[4])
	}
	return e, true
}

// parseEntry reads an entry's keys (title, linux, initrd, options).
func parseEntry(e *BootEntry, text string) {
	for _, line := range strings.Split(text, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		v = strings.TrimSpace(v)
		switch k {
		case "title":
			e.Title = v
		case "linux":
			e.Linux = v
		case "initrd":
			if path.Base(v) == verityInitrd {
				e.VerityInitrd = v
			} else {
				e.Initrd = v
			}
		case "options":
			e.Options = v
		}
	}
}

// rootGUID returns the PARTUUID an entry's options boot: root=, or for a
// verified root (root=/dev/mapper/strata-root) strata.root=.
func rootGUID(options string) string {
	for _, f := range strings.Fields(options) {
		for _, k := range []string{"root=PARTUUID=", verityRootParam + "PARTUUID="} {
			if g, ok := strings.CutPrefix(f, k); ok {
				return strings.ToUpper(g)
			}
		}
	}
	return ""
}

// rootAuto reports whether options find the root by its hash
// (strata.root=auto, a boot image's) instead of naming its partition.
func rootAuto(options string) bool {
	for _, f := range strings.Fields(options) {
		if f == verityRootParam+manifests.RootAuto {
			return true
		}
	}
	return false
}

// rootOptions are the options that name an entry's root: the partition
// itself, or, opened through dm-verity, the verified device, the
// partition below it and the root hash. An image whose initramfs does
// not open it cannot mount /dev/mapper/strata-root and stops: the entry
// fails closed, never booting the partition unverified.
func rootOptions(guid, rootHash string) string {
	guid = strings.ToLower(guid)
	if rootHash == "" {
		return "root=PARTUUID=" + guid
	}
	return "root=/dev/mapper/" + VerityDevice + " " + verityRootParam + "PARTUUID=" + guid + " " + VerityParam + rootHash
}

// readEntries lists strata's entries on the ESP, newest generation first,
// each with the slot its root= names on layout l. An entry that boots
// neither root is refused: the ESP is not the one strata wrote.
func readEntries(esp espFS, l *Layout) ([]BootEntry, error) {
	names, err := esp.List(entriesDir)
	if err != nil {
		return nil, err
	}
	slotOf := map[string]string{
		strings.ToUpper(l.Part(PartRootA).GUID): manifests.SlotA,
		strings.ToUpper(l.Part(PartRootB).GUID): manifests.SlotB,
	}
	var out []BootEntry
	for _, name := range names {
		e, ok := parseEntryName(name, entryFileRe)
		if !ok {
			continue
		}
		raw, err := esp.Read(path.Join(entriesDir, name), maxEntrySize)
		if err != nil {
			return nil, err
		}
		parseEntry(&e, string(raw))
		out = append(out, e)
	}
	ukis, err := esp.List(ukiDir)
	if err != nil {
		return nil, err
	}
	for _, name := range ukis {
		e, ok := parseEntryName(name, ukiFileRe)
		if !ok {
			continue
		}
		e.UKI = path.Join(ukiDir, name)
		head, err := esp.ReadHead(e.UKI, ukiHead)
		if err != nil {
			return nil, err
		}
		info, err := uki.ReadInfo(bytes.NewReader(head), int64(len(head)))
		if err != nil {
			return nil, fmt.Errorf("ESP: %s: %w", e.UKI, err)
		}
		e.Options, e.Title = info.Cmdline, osReleaseTitle(info.OSRelease)
		out = append(out, e)
	}
	for i := range out {
		e, name := &out[i], out[i].File
		if e.UKI != "" && rootAuto(e.Options) {
			// A boot image (SignImage) boots whichever root holds its
			// image: it boots the slot Install named it for.
			continue
		}
		slot := slotOf[rootGUID(e.Options)]
		switch {
		case slot == "":
			return nil, fmt.Errorf("boot entry %s boots root=PARTUUID=%s, neither root partition of this disk: %w", name, rootGUID(e.Options), ErrNotNodeDisk)
		case e.Slot != "" && e.Slot != slot:
			return nil, fmt.Errorf("boot entry %s boots root %s: %w", name, slot, ErrNotNodeDisk)
		}
		e.Slot = slot
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Generation > out[j].Generation })
	return out, nil
}

// entryText is an entry's content. The verity initrd, an uncompressed
// cpio, comes before the image's own (as early microcode does): the
// kernel unpacks concatenated archives, but takes nothing after a
// compressed one that ends in padding.
func entryText(e BootEntry) string {
	t := fmt.Sprintf("title %s\nlinux %s\n", e.Title, e.Linux)
	if e.VerityInitrd != "" {
		t += fmt.Sprintf("initrd %s\n", e.VerityInitrd)
	}
	return t + fmt.Sprintf("initrd %s\noptions %s\n", e.Initrd, e.Options)
}

// withRoot returns options booting the root partition guid (rootOptions:
// through dm-verity with rootHash, or unverified when it is empty),
// and a kernel panic rebooting after 10 s (panic=10: a kernel or
// initramfs that cannot boot the image uses up a try instead of hanging).
func withRoot(options, guid, rootHash string) string {
	out := []string{rootOptions(guid, rootHash)}
	for _, f := range strings.Fields(options) {
		if strings.HasPrefix(f, "root=") || strings.HasPrefix(f, "panic=") || strings.HasPrefix(f, VerityParam) || strings.HasPrefix(f, verityRootParam) {
			continue
		}
		out = append(out, f)
	}
	return strings.Join(append(out, "panic=10"), " ")
}

// migrateLegacy renames a disk's strata.conf (root A, from before
// upgrades) to strata-1-a.conf and makes loader.conf's default the
// pattern every strata entry matches.
func migrateLegacy(esp espFS, es []BootEntry) ([]BootEntry, error) {
	for i, e := range es {
		if e.ID != legacyEntry {
			continue
		}
		to := fmt.Sprintf("strata-1-%s.conf", e.Slot)
		for _, o := range es {
			if o.ID == to {
				return nil, fmt.Errorf("boot entries %s and %s both on the ESP: %w", e.File, o.File, ErrNotNodeDisk)
			}
		}
		if err := esp.Rename(path.Join(entriesDir, e.File), path.Join(entriesDir, to)); err != nil {
			return nil, err
		}
		es[i].ID, es[i].File, es[i].Generation = to, to, 1
	}
	raw, err := esp.Read("/loader/loader.conf", maxEntrySize)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(raw), "\n"), "\n") {
		if k, _, _ := strings.Cut(strings.TrimSpace(l), " "); k != "default" && l != "" {
			lines = append(lines, l)
		}
	}
	conf := loaderDefault + strings.Join(lines, "\n") + "\n"
	if conf != string(raw) {
		if err := esp.Write("/loader/loader.conf", []byte(conf)); err != nil {
			return nil, err
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Generation > es[j].Generation })
	return es, nil
}

// removeSlot removes every entry (loader entry or UKI) that boots slot
// (before its root is overwritten: nothing may boot a half-written
// root), then the kernels and initrds under /strata/ that only those
// entries used.
func removeSlot(esp espFS, es []BootEntry, slot string) ([]BootEntry, error) {
	// An entry or UKI an interrupted upgrade wrote and never made
	// bootable.
	for _, dir := range []string{entriesDir, ukiDir} {
		names, err := esp.List(dir)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			if m := pendingEntryRe.FindStringSubmatch(name); m != nil && strings.EqualFold(m[2], slot) {
				if err := esp.Remove(path.Join(dir, name)); err != nil {
					return nil, err
				}
			}
		}
	}
	var keep, gone []BootEntry
	for _, e := range es {
		if e.Slot != slot {
			keep = append(keep, e)
			continue
		}
		file := path.Join(entriesDir, e.File)
		if e.UKI != "" {
			file = e.UKI
		}
		if err := esp.Remove(file); err != nil {
			return nil, err
		}
		gone = append(gone, e)
	}
	// FAT compares names without case: so does this. Only files under
	// the slot's own /strata/SLOT/ go.
	used := map[string]bool{}
	for _, e := range keep {
		for _, f := range []string{e.Linux, e.Initrd, e.VerityInitrd} {
			if f != "" {
				used[strings.ToLower(path.Clean("/"+f))] = true
			}
		}
	}
	own := "/strata/" + slot + "/"
	for _, e := range gone {
		for _, f := range []string{e.Linux, e.Initrd, e.VerityInitrd} {
			if f == "" {
				continue
			}
			p := strings.ToLower(path.Clean("/" + f))
			if strings.HasPrefix(p, own) && !used[p] {
				if err := esp.Remove(p); err != nil {
					return nil, err
				}
			}
		}
	}
	return keep, esp.Sync()
}
