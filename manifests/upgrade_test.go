package manifests_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

// upgradeRec is an upgrade record to image version on slot, keeping
// layers.
func upgradeRec(version, slot string, compact bool, layers ...string) manifests.LedgerEntry {
	e := rec(manifests.LedgerUpgrade, version)
	e.Digest = digestOf("image " + version)
	e.Head = manifests.Ref{Version: "1.0.1", Digest: digestOf("o1.0.1")}
	e.Slot, e.Layers, e.Compact = slot, layers, compact
	return e
}

// An upgrade record filters the overlays in effect to the layers it
// keeps, names the image the node runs, and only a compacting one moves
// the base the line's tree folds from.
func TestLedgerUpgrade(t *testing.T) {
	l := newLedger(t) // provision 1.0.0, 1.0.1 in effect
	if err := l.Append(rec(manifests.LedgerApply, "1.0.2")); err != nil {
		t.Fatal(err)
	}
	if r := l.Running(); r.Action != manifests.LedgerProvision || l.Canonical().Seq != 0 {
		t.Fatalf("running %+v", r)
	}
	if err := l.Append(upgradeRec("1.1.0", manifests.SlotB, false, "1.0.1")); err != nil {
		t.Fatal(err)
	}
	if got := joined(l.Applied()); got != "1.0.1" {
		t.Fatalf("applied after an upgrade keeping 1.0.1: %s", got)
	}
	if r := l.Running(); r.Version != "1.1.0" || r.Slot != manifests.SlotB {
		t.Fatalf("running %+v", r)
	}
	if c := l.Canonical(); c.Action != manifests.LedgerProvision {
		t.Fatalf("an upgrade to a new recipe moved the canonical base: %+v", c)
	}
	if err := l.Append(rec(manifests.LedgerApply, "1.0.3")); err != nil {
		t.Fatal(err)
	}
	if got := joined(l.Applied()); got != "1.0.1 1.0.3" {
		t.Fatalf("applied: %s", got)
	}
	if err := l.Append(upgradeRec("1.0.0+r3", manifests.SlotA, true)); err != nil {
		t.Fatal(err)
	}
	if got := joined(l.Applied()); got != "" || l.Canonical().Version != "1.0.0+r3" || l.Running().Slot != manifests.SlotA {
		t.Fatalf("after compaction: applied %q canonical %+v", got, l.Canonical())
	}
	if err := l.CheckChain(); err != nil {
		t.Fatal(err)
	}
}

func joined(es []manifests.LedgerEntry) string { return strings.Join(versions(es), " ") }

// Upgrade fields are refused where they do not belong and checked where
// they do: a ledger is node state.
func TestLedgerUpgradeFields(t *testing.T) {
	bad := map[string]func(e *manifests.LedgerEntry){
		"upgrade without a slot": func(e *manifests.LedgerEntry) { e.Slot = "" },
		"slot c":                 func(e *manifests.LedgerEntry) { e.Slot = "c" },
		"slot with a path":       func(e *manifests.LedgerEntry) { e.Slot = "../a" },
		"layer not a version":    func(e *manifests.LedgerEntry) { e.Layers = []string{"../../etc"} },
		"dropped not a version":  func(e *manifests.LedgerEntry) { e.Dropped = []string{"x"} },
		"apply with a slot":      func(e *manifests.LedgerEntry) { e.Action, e.Layers = manifests.LedgerApply, nil },
		"apply with layers":      func(e *manifests.LedgerEntry) { e.Action, e.Slot = manifests.LedgerApply, "" },
		"restart marked compact": func(e *manifests.LedgerEntry) {
			e.Action, e.Slot, e.Layers, e.Compact = manifests.LedgerRestart, "", nil, true
		},
		"failed with upgrade fields": func(e *manifests.LedgerEntry) { e.Action = manifests.LedgerFailed },
		"upgrade marked offline":     func(e *manifests.LedgerEntry) { e.Offline = true },
	}
	for name, mutate := range bad {
		l := newLedger(t)
		e := upgradeRec("1.1.0", manifests.SlotB, false, "1.0.1")
		mutate(&e)
		if err := l.Append(e); err != nil {
			t.Fatal(err)
		}
		if err := l.CheckChain(); !errors.Is(err, manifests.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// A failed upgrade names its slot.
	l := newLedger(t)
	f := rec(manifests.LedgerFailed, "1.1.0")
	f.Slot = manifests.SlotB
	if err := l.Append(f); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckChain(); err != nil {
		t.Fatalf("failed upgrade record: %v", err)
	}
}

func validStaged() *manifests.StagedUpgrade {
	return &manifests.StagedUpgrade{
		Schema: manifests.Schema, Kind: manifests.KindUpgrade,
		Record: upgradeRec("1.1.0", manifests.SlotB, false, "1.0.1"),
		From:   manifests.Ref{Version: "1.0.0", Digest: digestOf("image")},
		Entry:  "strata-2-b.conf", BootID: "0f5c8f3e-2d7a-4c1b-9a57-3c1d2e4f5a6b",
		Staged: "2026-12-01T10:00:00Z",
	}
}

// Every field of a staged upgrade is checked: a planted upgrade.json
// must not name another entry, slot or boot.
func TestStagedUpgradeValidate(t *testing.T) {
	if err := validStaged().Validate(); err != nil {
		t.Fatal(err)
	}
	// A Secure Boot disk's entry is its unified kernel image.
	u := validStaged()
	u.Entry = "strata-2-b.efi"
	if err := u.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(u *manifests.StagedUpgrade){
		"kind":                func(u *manifests.StagedUpgrade) { u.Kind = "ledger" },
		"record not upgrade":  func(u *manifests.StagedUpgrade) { u.Record.Action = manifests.LedgerApply },
		"record bad digest":   func(u *manifests.StagedUpgrade) { u.Record.Digest = "sha256:x" },
		"entry of other slot": func(u *manifests.StagedUpgrade) { u.Entry = "strata-2-a.conf" },
		"entry path":          func(u *manifests.StagedUpgrade) { u.Entry = "../../EFI/BOOT/BOOTX64.EFI" },
		"entry with counter":  func(u *manifests.StagedUpgrade) { u.Entry = "strata-2-b+3.conf" },
		"entry generation 0":  func(u *manifests.StagedUpgrade) { u.Entry = "strata-0-b.conf" },
		"entry other suffix":  func(u *manifests.StagedUpgrade) { u.Entry = "strata-2-b.efi.conf" },
		"uki with counter":    func(u *manifests.StagedUpgrade) { u.Entry = "strata-2-b+1.efi" },
		"boot id":             func(u *manifests.StagedUpgrade) { u.BootID = "$(reboot)" },
		"from version":        func(u *manifests.StagedUpgrade) { u.From.Version = "v1" },
		"staged time":         func(u *manifests.StagedUpgrade) { u.Staged = "yesterday" },
	}
	for name, mutate := range bad {
		u := validStaged()
		mutate(u)
		if err := u.Validate(); !errors.Is(err, manifests.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// An overlay's signer is a key id, on apply and failed records only.
func TestLedgerSigner(t *testing.T) {
	for _, c := range []struct {
		action manifests.LedgerAction
		signer string
		ok     bool
	}{
		{manifests.LedgerApply, "0033A74F42697927", true},
		{manifests.LedgerFailed, "0033A74F42697927", true},
		{manifests.LedgerRollback, "0033A74F42697927", false},
		{manifests.LedgerApply, "0033a74f42697927", false},
		{manifests.LedgerApply, "../../etc/passwd", false},
	} {
		l := newLedger(t)
		e := rec(c.action, "1.0.1")
		e.Signer = c.signer
		if err := l.Append(e); err != nil {
			t.Fatal(err)
		}
		if err := l.CheckChain(); (err == nil) != c.ok {
			t.Errorf("%s record signed %q: %v", c.action, c.signer, err)
		}
	}
}
