package manifests_test

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/manifests"
)

func ref(v string) manifests.Ref { return manifests.Ref{Version: v, Digest: digestOf(v)} }

func validOverlay() *manifests.OverlayManifest {
	return &manifests.OverlayManifest{
		Schema:   manifests.Schema,
		Kind:     manifests.KindOverlay,
		Line:     "demo",
		Version:  "1.0.3",
		Parent:   ref("1.0.2"),
		Lineage:  []manifests.Ref{ref("1.0.0"), ref("1.0.1"), ref("1.0.2")},
		Requires: manifests.Requires{Image: "^1.0.0"},
		Entries: []manifests.Entry{
			{Path: "etc/demo", Type: manifests.TypeDir, Mode: 0755},
			{Path: "etc/demo/web.conf", Type: manifests.TypeFile, Mode: 0644, Size: 3, SHA256: hexA},
		},
		Deletes:    []string{"etc/old", "usr/share/x"},
		Services:   []manifests.ServiceAction{sa("demo-web.service", manifests.ActionRestart, false, "etc/demo/web.conf")},
		TreeDigest: digestOf("tree"),
		Created:    "2026-01-02T00:00:00Z",
	}
}

func TestOverlayValidate(t *testing.T) {
	if err := validOverlay().Validate(); err != nil {
		t.Fatalf("valid overlay: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(m *manifests.OverlayManifest)
		target error
	}{
		{"wrong kind", func(m *manifests.OverlayManifest) { m.Kind = manifests.KindImage }, manifests.ErrInvalid},
		{"wrong schema", func(m *manifests.OverlayManifest) { m.Schema = 0 }, manifests.ErrInvalid},
		{"bad line", func(m *manifests.OverlayManifest) { m.Line = "Demo" }, manifests.ErrInvalid},
		{"version not greater", func(m *manifests.OverlayManifest) { m.Version = "1.0.2" }, manifests.ErrVersion},
		{"version not strict", func(m *manifests.OverlayManifest) { m.Version = "v1.0.3" }, manifests.ErrVersion},
		{"bad parent digest", func(m *manifests.OverlayManifest) {
			m.Parent.Digest = "x"
			m.Lineage[2].Digest = "x"
		}, manifests.ErrInvalid},
		{"bad tree digest", func(m *manifests.OverlayManifest) { m.TreeDigest = "" }, manifests.ErrInvalid},
		{"lineage empty", func(m *manifests.OverlayManifest) { m.Lineage = nil }, manifests.ErrInvalid},
		{"lineage ends before parent", func(m *manifests.OverlayManifest) { m.Lineage = m.Lineage[:2] }, manifests.ErrInvalid},
		{"lineage ends at other digest", func(m *manifests.OverlayManifest) { m.Lineage[2].Digest = digestOf("other") }, manifests.ErrInvalid},
		{"lineage not increasing", func(m *manifests.OverlayManifest) { m.Lineage[0], m.Lineage[1] = m.Lineage[1], m.Lineage[0] }, manifests.ErrVersion},
		{"lineage bad digest", func(m *manifests.OverlayManifest) { m.Lineage[0].Digest = "sha256:x" }, manifests.ErrInvalid},
		{"bad constraint", func(m *manifests.OverlayManifest) { m.Requires.Image = "^^1" }, manifests.ErrVersion},
		{"bad created", func(m *manifests.OverlayManifest) { m.Created = "yesterday" }, manifests.ErrInvalid},
		{"changes nothing", func(m *manifests.OverlayManifest) { m.Entries, m.Deletes = nil, nil }, manifests.ErrInvalid},
		{"empty slices change nothing", func(m *manifests.OverlayManifest) {
			m.Entries, m.Deletes = []manifests.Entry{}, []string{}
		}, manifests.ErrInvalid},
		{"entries unsorted", func(m *manifests.OverlayManifest) { m.Entries[0], m.Entries[1] = m.Entries[1], m.Entries[0] }, manifests.ErrInvalid},
		{"entries duplicated", func(m *manifests.OverlayManifest) { m.Entries[1] = m.Entries[0] }, manifests.ErrInvalid},
		{"entry invalid", func(m *manifests.OverlayManifest) { m.Entries[1].SHA256 = "" }, manifests.ErrInvalid},
		{"entry is ledger", func(m *manifests.OverlayManifest) {
			m.Entries = append(m.Entries, manifests.Entry{Path: manifests.LedgerPath, Type: manifests.TypeFile, SHA256: hexA})
		}, manifests.ErrUnsafePath},
		{"entry is state dir", func(m *manifests.OverlayManifest) {
			m.Entries = append(m.Entries, manifests.Entry{Path: manifests.StateDir, Type: manifests.TypeDir, Mode: 0755})
		}, manifests.ErrUnsafePath},
		{"entry is image manifest", func(m *manifests.OverlayManifest) {
			m.Entries = append(m.Entries, manifests.Entry{Path: manifests.ImageManifestPath, Type: manifests.TypeFile, SHA256: hexA})
		}, manifests.ErrUnsafePath},
		// The trust store changes only by key rotation; strata's own
		// directories stay root's and 0755 (issue 7, class 3).
		{"entry writes a trusted key", func(m *manifests.OverlayManifest) {
			m.Entries = append(m.Entries, manifests.Entry{Path: manifests.KeysDir + "/attacker.pub", Type: manifests.TypeFile, Mode: 0644, Size: 3, SHA256: hexA})
		}, manifests.ErrUnsafePath},
		{"entry replaces a trusted key by a symlink", func(m *manifests.OverlayManifest) {
			m.Entries = append(m.Entries, manifests.Entry{Path: manifests.KeysDir + "/op.pub", Type: manifests.TypeSymlink, Mode: 0777, Target: "/home/x.pub"})
		}, manifests.ErrUnsafePath},
		{"delete of a trusted key", func(m *manifests.OverlayManifest) { m.Deletes = []string{"etc/old", manifests.KeysDir + "/op.pub"} }, manifests.ErrUnsafePath},
		{"var/lib handed to a user", func(m *manifests.OverlayManifest) {
			m.Entries = append(m.Entries, manifests.Entry{Path: "var/lib", Type: manifests.TypeDir, Mode: 0755, UID: 1000, GID: 1000})
		}, manifests.ErrUnsafePath},
		{"var/lib made world-writable", func(m *manifests.OverlayManifest) {
			m.Entries = append(m.Entries, manifests.Entry{Path: "var/lib", Type: manifests.TypeDir, Mode: 0777})
		}, manifests.ErrUnsafePath},
		{"keys directory made group-writable", func(m *manifests.OverlayManifest) {
			m.Entries = append(m.Entries, manifests.Entry{Path: manifests.KeysDir, Type: manifests.TypeDir, Mode: 0775})
		}, manifests.ErrUnsafePath},
		{"delete of ledger", func(m *manifests.OverlayManifest) { m.Deletes = []string{"etc/old", manifests.LedgerPath} }, manifests.ErrUnsafePath},
		{"delete of state dir", func(m *manifests.OverlayManifest) { m.Deletes = []string{manifests.StateDir} }, manifests.ErrUnsafePath},
		{"delete of image manifest", func(m *manifests.OverlayManifest) { m.Deletes = []string{manifests.ImageManifestPath} }, manifests.ErrUnsafePath},
		{"deletes unsorted", func(m *manifests.OverlayManifest) { m.Deletes = []string{"usr/share/x", "etc/old"} }, manifests.ErrInvalid},
		{"deletes duplicated", func(m *manifests.OverlayManifest) { m.Deletes = []string{"etc/old", "etc/old"} }, manifests.ErrInvalid},
		{"delete also changed", func(m *manifests.OverlayManifest) { m.Deletes = []string{"etc/demo/web.conf"} }, manifests.ErrInvalid},
		{"delete unsafe", func(m *manifests.OverlayManifest) { m.Deletes = []string{"../etc"} }, manifests.ErrUnsafePath},
		{"delete absolute", func(m *manifests.OverlayManifest) { m.Deletes = []string{"/etc"} }, manifests.ErrUnsafePath},
		{"service without unit", func(m *manifests.OverlayManifest) { m.Services[0].Unit = "" }, manifests.ErrInvalid},
		{"service daemon-reload action", func(m *manifests.OverlayManifest) { m.Services[0].Action = manifests.ActionDaemonReload }, manifests.ErrInvalid},
		{"service unknown action", func(m *manifests.OverlayManifest) { m.Services[0].Action = "kill" }, manifests.ErrInvalid},
		{"service unit starting with a dash", func(m *manifests.OverlayManifest) { m.Services[0].Unit = "--now.service" }, manifests.ErrInvalid},
		{"service unit without a type", func(m *manifests.OverlayManifest) { m.Services[0].Unit = "nginx" }, manifests.ErrInvalid},
		{"service unit with a space", func(m *manifests.OverlayManifest) { m.Services[0].Unit = "a b.service" }, manifests.ErrInvalid},
	}
	for _, tt := range tests {
		m := validOverlay()
		tt.mutate(m)
		if err := m.Validate(); !errors.Is(err, tt.target) {
			t.Errorf("%s: Validate() = %v, want %v", tt.name, err, tt.target)
		}
	}
	// Deletes only, or entries only, are each enough.
	m := validOverlay()
	m.Entries = nil
	if err := m.Validate(); err != nil {
		t.Errorf("deletes-only overlay: %v", err)
	}
	m = validOverlay()
	m.Deletes = nil
	if err := m.Validate(); err != nil {
		t.Errorf("entries-only overlay: %v", err)
	}
	// The first overlay of a line has only the image in its lineage.
	m = validOverlay()
	m.Version, m.Parent, m.Lineage = "1.0.1", ref("1.0.0"), []manifests.Ref{ref("1.0.0")}
	if err := m.Validate(); err != nil {
		t.Errorf("first overlay: %v", err)
	}
}

func TestOverlayAncestors(t *testing.T) {
	m := validOverlay()
	tests := []struct {
		from string
		want []string
	}{
		{"1.0.0", []string{"1.0.1", "1.0.2"}},
		{"1.0.1", []string{"1.0.2"}},
		{"1.0.2", nil},
		// Not in the lineage: everything newer, as a window may start
		// after the node's head.
		{"0.9.0", []string{"1.0.0", "1.0.1", "1.0.2"}},
		{"1.0.1-rc.1", []string{"1.0.1", "1.0.2"}},
	}
	for _, tt := range tests {
		if got := m.Ancestors(tt.from); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Ancestors(%q) = %v, want %v", tt.from, got, tt.want)
		}
	}
	first := validOverlay()
	first.Lineage = []manifests.Ref{ref("1.0.0")}
	if got := first.Ancestors("1.0.0"); got != nil {
		t.Errorf("first overlay Ancestors(1.0.0) = %v, want none", got)
	}
	if got := first.Ancestors("2.0.0"); got != nil {
		t.Errorf("first overlay Ancestors(unknown) = %v, want none", got)
	}
	if !m.Covers("1.0.0") || !m.Covers("1.0.2") || m.Covers("0.9.0") {
		t.Errorf("Covers: the lineage starts at 1.0.0")
	}
	var line []manifests.Ref
	for i := 0; i < manifests.LineageWindow+10; i++ {
		line = append(line, ref("1.0."+strconv.Itoa(i)))
	}
	w := manifests.WindowLineage(line)
	if len(w) != manifests.LineageWindow || w[len(w)-1] != line[len(line)-1] || w[0] != line[10] {
		t.Errorf("WindowLineage kept %d refs from %s", len(w), w[0].Version)
	}
}

func validIndex() *manifests.Index {
	return &manifests.Index{
		Schema:  manifests.Schema,
		Kind:    manifests.KindIndex,
		Serial:  7,
		Expires: "2027-01-01T00:00:00Z",
		Lines: []manifests.Line{
			{
				Name:  "demo",
				Image: manifests.ImageRef{Version: "1.0.0", File: "images/demo-1.0.0.squashfs", Digest: digestOf("1.0.0"), SHA256: digestOf("sq"), Size: 4096},
				Overlays: []manifests.OverlayRef{
					{Version: "1.0.1", File: "overlays/demo-1.0.1.tar.zst", Digest: digestOf("1.0.1"), Size: 512, Parent: ref("1.0.0")},
					{Version: "1.0.2", File: "overlays/demo-1.0.2.tar.zst", Digest: digestOf("1.0.2"), Size: 512, Parent: ref("1.0.1")},
				},
				Upgrades: []manifests.ImageRef{
					{Version: "1.1.0", File: "images/demo-1.1.0.squashfs", Digest: digestOf("1.1.0"), SHA256: hexOf("sq 1.1.0"), Size: 4096,
						Boot: &manifests.BootImageRef{File: "images/demo-1.1.0.efi", SHA256: hexOf("efi 1.1.0"), Size: 8192}},
					{Version: "1.0.0+head.1.0.2", File: "images/demo-1.0.0+head.1.0.2.squashfs", Digest: digestOf("r2"), SHA256: hexOf("sq r2"), Size: 4096, Head: &manifests.Ref{Version: "1.0.2", Digest: digestOf("1.0.2")}},
					{Version: "1.2.0", File: "images/demo-1.2.0.squashfs", Digest: digestOf("1.2.0"), SHA256: hexOf("sq 1.2.0"), Size: 4096},
				},
			},
			{
				Name:  "other",
				Image: manifests.ImageRef{Version: "2.0.0", Digest: digestOf("2.0.0"), Size: 4096},
			},
		},
	}
}

func TestIndexValidate(t *testing.T) {
	if err := validIndex().Validate(); err != nil {
		t.Fatalf("valid index: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(x *manifests.Index)
		target error
	}{
		{"wrong kind", func(x *manifests.Index) { x.Kind = manifests.KindLedger }, manifests.ErrInvalid},
		{"wrong schema", func(x *manifests.Index) { x.Schema = 2 }, manifests.ErrInvalid},
		{"no serial", func(x *manifests.Index) { x.Serial = 0 }, manifests.ErrInvalid},
		{"image without its size", func(x *manifests.Index) { x.Lines[0].Image.Size = 0 }, manifests.ErrInvalid},
		{"overlay without its size", func(x *manifests.Index) { x.Lines[0].Overlays[1].Size = 0 }, manifests.ErrInvalid},
		{"no expiry", func(x *manifests.Index) { x.Expires = "" }, manifests.ErrInvalid},
		{"expiry not RFC 3339", func(x *manifests.Index) { x.Expires = "next week" }, manifests.ErrInvalid},
		{"bad line name", func(x *manifests.Index) { x.Lines[1].Name = "-x" }, manifests.ErrInvalid},
		{"duplicate line", func(x *manifests.Index) { x.Lines[1].Name = "demo" }, manifests.ErrInvalid},
		{"bad image version", func(x *manifests.Index) { x.Lines[1].Image.Version = "2.0" }, manifests.ErrVersion},
		{"first parent not image", func(x *manifests.Index) { x.Lines[0].Overlays[0].Parent = ref("0.9.0") }, manifests.ErrInvalid},
		{"parent digest differs", func(x *manifests.Index) { x.Lines[0].Overlays[1].Parent.Digest = digestOf("x") }, manifests.ErrInvalid},
		{"parent skips", func(x *manifests.Index) { x.Lines[0].Overlays[1].Parent = ref("1.0.0") }, manifests.ErrInvalid},
		{"overlays swapped", func(x *manifests.Index) {
			o := x.Lines[0].Overlays
			o[0], o[1] = o[1], o[0]
		}, manifests.ErrInvalid},
		{"version not increasing", func(x *manifests.Index) {
			x.Lines[0].Overlays[1].Version = "1.0.1"
		}, manifests.ErrVersion},
		{"version below image", func(x *manifests.Index) {
			x.Lines[0].Overlays = x.Lines[0].Overlays[:1]
			x.Lines[0].Overlays[0].Version = "0.9.0"
		}, manifests.ErrVersion},
		{"upgrade image not newer than the line's", func(x *manifests.Index) { x.Lines[0].Upgrades[0].Version = "1.0.0" }, manifests.ErrInvalid},
		{"upgrade images out of order", func(x *manifests.Index) { x.Lines[0].Upgrades[2].Version = "1.0.5" }, manifests.ErrInvalid},
		{"upgrade image version", func(x *manifests.Index) { x.Lines[0].Upgrades[0].Version = "v1.1" }, manifests.ErrVersion},
		{"upgrade image outside images/", func(x *manifests.Index) { x.Lines[0].Upgrades[0].File = "../etc/passwd" }, manifests.ErrInvalid},
		{"upgrade image in overlays/", func(x *manifests.Index) { x.Lines[0].Upgrades[0].File = "overlays/demo-1.1.0.squashfs" }, manifests.ErrInvalid},
		{"upgrade image without sha256", func(x *manifests.Index) { x.Lines[0].Upgrades[0].SHA256 = "" }, manifests.ErrInvalid},
		{"upgrade image without size", func(x *manifests.Index) { x.Lines[0].Upgrades[0].Size = 0 }, manifests.ErrInvalid},
		{"upgrade image digest", func(x *manifests.Index) { x.Lines[0].Upgrades[0].Digest = "sha256:xyz" }, manifests.ErrInvalid},
		{"upgrade image is the line's", func(x *manifests.Index) { x.Lines[0].Upgrades[0].File = x.Lines[0].Image.File }, manifests.ErrInvalid},
		{"upgrade image twice", func(x *manifests.Index) { x.Lines[0].Upgrades[2].Digest = x.Lines[0].Upgrades[0].Digest }, manifests.ErrInvalid},
		{"regenerated image's version", func(x *manifests.Index) { x.Lines[0].Upgrades[1].Version = "1.0.0+head.1.0.1" }, manifests.ErrInvalid},
		{"regenerated image's head", func(x *manifests.Index) { x.Lines[0].Upgrades[1].Head.Digest = "sha256:0" }, manifests.ErrInvalid},
		{"boot image outside images/", func(x *manifests.Index) { x.Lines[0].Upgrades[0].Boot.File = "overlays/demo-1.1.0.efi" }, manifests.ErrInvalid},
		{"boot image not .efi", func(x *manifests.Index) { x.Lines[0].Upgrades[0].Boot.File = "images/demo-1.1.0.squashfs.x" }, manifests.ErrInvalid},
		{"boot image path escapes", func(x *manifests.Index) { x.Lines[0].Upgrades[0].Boot.File = "images/../../x.efi" }, manifests.ErrInvalid},
		{"boot image without sha256", func(x *manifests.Index) { x.Lines[0].Upgrades[0].Boot.SHA256 = "" }, manifests.ErrInvalid},
		{"boot image without size", func(x *manifests.Index) { x.Lines[0].Upgrades[0].Boot.Size = 0 }, manifests.ErrInvalid},
		{"boot image over 1 GiB", func(x *manifests.Index) { x.Lines[0].Upgrades[0].Boot.Size = 1<<30 + 1 }, manifests.ErrInvalid},
		{"boot image is an image file", func(x *manifests.Index) {
			x.Lines[0].Upgrades[0].Boot.File = "images/demo-1.2.0.efi"
			x.Lines[0].Upgrades[2].File = "images/demo-1.2.0.efi"
		}, manifests.ErrInvalid},
		{"line image's boot image", func(x *manifests.Index) {
			x.Lines[0].Image.Boot = &manifests.BootImageRef{File: "images/demo-1.0.0.efi", SHA256: "zz", Size: 1}
		}, manifests.ErrInvalid},
		{"two regenerated images of a head", func(x *manifests.Index) {
			u := x.Lines[0].Upgrades[1]
			h := *u.Head
			u.Head, u.File, u.Digest = &h, "images/r2b.squashfs", digestOf("r2b")
			x.Lines[0].Upgrades = append(x.Lines[0].Upgrades, u)
		}, manifests.ErrInvalid},
	}
	for _, tt := range tests {
		x := validIndex()
		tt.mutate(x)
		if err := x.Validate(); !errors.Is(err, tt.target) {
			t.Errorf("%s: Validate() = %v, want %v", tt.name, err, tt.target)
		}
	}
}

// An authentic index is still refused when it is older than one the
// node accepted (rollback) or past its expiry (freeze); the errors say
// which.
func TestIndexCheckFresh(t *testing.T) {
	x := validIndex() // serial 7, expires 2027-01-01
	before := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if err := x.CheckFresh(before, 0); err != nil {
		t.Fatalf("fresh index, nothing accepted yet: %v", err)
	}
	if err := x.CheckFresh(before, 7); err != nil {
		t.Fatalf("the same serial again: %v", err)
	}
	err := x.CheckFresh(before, 8)
	if !errors.Is(err, manifests.ErrIndexRollback) || !errors.Is(err, manifests.ErrRejected) || !strings.Contains(err.Error(), "serial 7") || !strings.Contains(err.Error(), "serial 8") {
		t.Errorf("older serial: %v, want ErrIndexRollback naming both serials", err)
	}
	err = x.CheckFresh(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), 0)
	if !errors.Is(err, manifests.ErrIndexExpired) || !strings.Contains(err.Error(), "2027-01-01T00:00:00Z") {
		t.Errorf("at its expiry: %v, want ErrIndexExpired naming the time", err)
	}
	// Issue 25: a key holder's index at serial 2^62 froze every node that
	// took it. A node takes at most MaxSerialStep past what it accepted.
	x.Serial = 6 + manifests.MaxSerialStep
	if err := x.CheckFresh(before, 6); err != nil {
		t.Errorf("a step of MaxSerialStep: %v", err)
	}
	x.Serial = 1 << 62
	if err := x.CheckFresh(before, 7); !errors.Is(err, manifests.ErrIndexSerialJump) || !errors.Is(err, manifests.ErrRejected) {
		t.Errorf("serial 2^62 after 7: %v, want ErrIndexSerialJump", err)
	}
	if err := x.CheckFresh(before, 0); err != nil {
		t.Errorf("serial 2^62 on a node that accepted none: %v (Validate bounds it)", err)
	}
	if err := x.Validate(); !errors.Is(err, manifests.ErrInvalid) {
		t.Errorf("Validate of serial 2^62: %v, want ErrInvalid (over 2^53)", err)
	}
}

func TestIndexFindHead(t *testing.T) {
	x := validIndex()
	l, err := x.Find("demo")
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Head(); h != (manifests.Ref{Version: "1.0.2", Digest: digestOf("1.0.2")}) {
		t.Errorf("demo head = %+v", h)
	}
	o, err := x.Find("other")
	if err != nil {
		t.Fatal(err)
	}
	if h := o.Head(); h != (manifests.Ref{Version: "2.0.0", Digest: digestOf("2.0.0")}) {
		t.Errorf("other head = %+v", h)
	}
	if _, err := x.Find("missing"); !errors.Is(err, manifests.ErrInvalid) {
		t.Errorf("Find(missing) = %v", err)
	}
	// Find returns a pointer into the index.
	l.Name = "renamed"
	if x.Lines[0].Name != "renamed" {
		t.Error("Find does not return the index's own line")
	}
}

func validImage() *manifests.ImageManifest {
	files := []manifests.Entry{
		{Path: "etc", Type: manifests.TypeDir, Mode: 0755},
		{Path: "etc/x", Type: manifests.TypeFile, Mode: 0644, Size: 1, SHA256: hexA},
		{Path: "usr", Type: manifests.TypeDir, Mode: 0755},
	}
	return &manifests.ImageManifest{
		Schema: manifests.Schema, Kind: manifests.KindImage, Line: "demo", Version: "1.0.0",
		Created: "2026-01-01T00:00:00Z", Compressor: "zstd",
		TreeDigest: manifests.TreeDigest(files), Files: files,
	}
}

func TestImageManifestValidate(t *testing.T) {
	if err := validImage().Validate(); err != nil {
		t.Fatalf("valid image: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(m *manifests.ImageManifest)
		target error
	}{
		{"wrong kind", func(m *manifests.ImageManifest) { m.Kind = manifests.KindOverlay }, manifests.ErrInvalid},
		{"bad line", func(m *manifests.ImageManifest) { m.Line = "" }, manifests.ErrInvalid},
		{"bad version", func(m *manifests.ImageManifest) { m.Version = "1.0" }, manifests.ErrVersion},
		{"bad digest", func(m *manifests.ImageManifest) { m.TreeDigest = "sha256:" }, manifests.ErrInvalid},
		{"digest mismatch", func(m *manifests.ImageManifest) { m.Files[1].Mode = 0600 }, manifests.ErrInvalid},
		{"base without head", func(m *manifests.ImageManifest) { r := ref("1.0.0"); m.Base = &r }, manifests.ErrInvalid},
		{"unsorted", func(m *manifests.ImageManifest) {
			m.Files[0], m.Files[2] = m.Files[2], m.Files[0]
			m.TreeDigest = manifests.TreeDigest(m.Files)
		}, manifests.ErrInvalid},
		{"node state file", func(m *manifests.ImageManifest) {
			m.Files = append(m.Files, manifests.Entry{Path: "var/lib/strata/x", Type: manifests.TypeFile, SHA256: hexA})
			m.TreeDigest = manifests.TreeDigest(m.Files)
		}, manifests.ErrUnsafePath},
	}
	for _, tt := range tests {
		m := validImage()
		tt.mutate(m)
		if err := m.Validate(); !errors.Is(err, tt.target) {
			t.Errorf("%s: Validate() = %v, want %v", tt.name, err, tt.target)
		}
	}
}

func TestValidLine(t *testing.T) {
	for _, ok := range []string{"demo", "a", "0", "a.b_c-d", "9lives"} {
		if err := manifests.ValidLine(ok); err != nil {
			t.Errorf("ValidLine(%q) = %v", ok, err)
		}
	}
	long := ""
	for len(long) < 65 {
		long += "a"
	}
	for _, bad := range []string{"", "-a", ".a", "_a", "Demo", "a b", "a/b", "é", long} {
		if err := manifests.ValidLine(bad); !errors.Is(err, manifests.ErrInvalid) {
			t.Errorf("ValidLine(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if err := manifests.ValidLine(long[:64]); err != nil {
		t.Errorf("ValidLine(64 chars) = %v", err)
	}
}

func TestCarries(t *testing.T) {
	m := &manifests.OverlayManifest{Entries: []manifests.Entry{{Path: "etc/a"}, {Path: "etc/b"}}, Deletes: []string{"etc/c"}}
	for p, want := range map[string]bool{"etc/a": true, "etc/b": true, "etc/c": false, "etc": false} {
		if got := m.Carries(p); got != want {
			t.Errorf("Carries(%s) = %v, want %v", p, got, want)
		}
	}
}
