package manifests_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/strata-dev/strata/manifests"
)

func digestOf(s string) string { return manifests.Digest([]byte(s)) }

// hexOf is the bare hex SHA-256 of s.
func hexOf(s string) string { return strings.TrimPrefix(digestOf(s), manifests.DigestPrefix) }

// newLedger returns a ledger of a provision, two applies and a rollback.
func newLedger(t *testing.T) *manifests.Ledger {
	t.Helper()
	l := &manifests.Ledger{Schema: manifests.Schema, Kind: manifests.KindLedger}
	img := manifests.Ref{Version: "1.0.0", Digest: digestOf("image")}
	recs := []manifests.LedgerEntry{
		{Action: manifests.LedgerProvision, Line: "demo", Version: "1.0.0", Digest: img.Digest, Image: "1.0.0", Head: img, TreeDigest: digestOf("t0"), Time: "2026-01-01T00:00:00Z"},
		{Action: manifests.LedgerApply, Line: "demo", Version: "1.0.1", Digest: digestOf("o1"), Image: "1.0.0", Head: manifests.Ref{Version: "1.0.1", Digest: digestOf("o1")}, TreeDigest: digestOf("t1"), Time: "2026-01-02T00:00:00Z"},
		{Action: manifests.LedgerApply, Line: "demo", Version: "1.0.2", Digest: digestOf("o2"), Image: "1.0.0", Head: manifests.Ref{Version: "1.0.2", Digest: digestOf("o2")}, TreeDigest: digestOf("t2"), Time: "2026-01-03T00:00:00Z"},
		{Action: manifests.LedgerRollback, Line: "demo", Version: "1.0.2", Digest: digestOf("o2"), Image: "1.0.0", Head: manifests.Ref{Version: "1.0.1", Digest: digestOf("o1")}, TreeDigest: digestOf("t1"), Time: "2026-01-04T00:00:00Z"},
	}
	for _, r := range recs {
		if err := l.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// rec returns a well-formed record of action about version.
func rec(action manifests.LedgerAction, version string) manifests.LedgerEntry {
	ref := manifests.Ref{Version: version, Digest: digestOf("o" + version)}
	return manifests.LedgerEntry{Action: action, Line: "demo", Version: ref.Version, Digest: ref.Digest, Image: "1.0.0", Head: ref, TreeDigest: digestOf("t" + version), Time: "2026-01-05T00:00:00Z"}
}

func TestLedgerAppendChains(t *testing.T) {
	l := newLedger(t)
	for i, e := range l.Entries {
		if e.Seq != i {
			t.Errorf("record %d has seq %d", i, e.Seq)
		}
		wantPrev := ""
		if i > 0 {
			wantPrev = l.Entries[i-1].Hash
		}
		if e.Prev != wantPrev {
			t.Errorf("record %d prev %q, want %q", i, e.Prev, wantPrev)
		}
		h, err := manifests.EntryHash(e)
		if err != nil || h != e.Hash || !manifests.ValidDigest(h) {
			t.Errorf("record %d hash %q, EntryHash %q (%v)", i, e.Hash, h, err)
		}
	}
	if err := l.CheckChain(); err != nil {
		t.Fatalf("CheckChain on a fresh ledger: %v", err)
	}
	if l.Last().Action != manifests.LedgerRollback {
		t.Fatalf("Last() = %+v", l.Last())
	}
	// Append ignores caller-supplied Seq, Prev and Hash.
	junk := rec(manifests.LedgerRestart, "1.0.1")
	junk.Seq, junk.Prev, junk.Hash = 99, "x", "y"
	if err := l.Append(junk); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckChain(); err != nil {
		t.Fatalf("CheckChain after Append with junk chain fields: %v", err)
	}
	// The ledger survives an encode/decode round trip.
	b, err := manifests.Encode(l)
	if err != nil {
		t.Fatal(err)
	}
	var back manifests.Ledger
	if err := manifests.Decode(b, &back); err != nil {
		t.Fatal(err)
	}
	if err := back.CheckChain(); err != nil {
		t.Fatalf("CheckChain after round trip: %v", err)
	}
}

func TestLedgerCheckChainTamper(t *testing.T) {
	tampers := map[string]func(e *manifests.LedgerEntry){
		"action":      func(e *manifests.LedgerEntry) { e.Action = manifests.LedgerRollback },
		"line":        func(e *manifests.LedgerEntry) { e.Line = "other" },
		"version":     func(e *manifests.LedgerEntry) { e.Version = "9.9.9" },
		"digest":      func(e *manifests.LedgerEntry) { e.Digest = digestOf("evil") },
		"image":       func(e *manifests.LedgerEntry) { e.Image = "0.0.1" },
		"head":        func(e *manifests.LedgerEntry) { e.Head.Version = "1.0.9" },
		"tree digest": func(e *manifests.LedgerEntry) { e.TreeDigest = digestOf("evil") },
		"time":        func(e *manifests.LedgerEntry) { e.Time = "2030-01-01T00:00:00Z" },
		"pending": func(e *manifests.LedgerEntry) {
			e.Pending = []manifests.ServiceAction{{Unit: "x.service", Action: manifests.ActionRestart}}
		},
		"done": func(e *manifests.LedgerEntry) {
			e.Done = []manifests.ServiceAction{{Unit: "x.service", Action: manifests.ActionRestart}}
		},
	}
	for name, tamper := range tampers {
		l := newLedger(t)
		tamper(&l.Entries[2])
		err := l.CheckChain()
		if !errors.Is(err, manifests.ErrInvalid) {
			t.Errorf("tampered %s: CheckChain = %v, want ErrInvalid", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "record 2") {
			t.Errorf("tampered %s: error %q does not name record 2", name, err)
		}
	}
	// Rehashing the tampered record breaks the link from the next one.
	l := newLedger(t)
	l.Entries[1].TreeDigest = digestOf("evil")
	l.Entries[1].Hash, _ = manifests.EntryHash(l.Entries[1])
	if err := l.CheckChain(); err == nil || !strings.Contains(err.Error(), "record 2") {
		t.Errorf("rehashed tamper: CheckChain = %v, want an error naming record 2", err)
	}
	// Changing the hash field itself.
	l = newLedger(t)
	l.Entries[3].Hash = digestOf("x")
	if err := l.CheckChain(); err == nil || !strings.Contains(err.Error(), "record 3") {
		t.Errorf("altered hash: CheckChain = %v, want an error naming record 3", err)
	}
}

func TestLedgerCheckChainStructure(t *testing.T) {
	// Reordering records.
	l := newLedger(t)
	l.Entries[1], l.Entries[2] = l.Entries[2], l.Entries[1]
	if err := l.CheckChain(); !errors.Is(err, manifests.ErrInvalid) || !strings.Contains(err.Error(), "record 1") {
		t.Errorf("reordered: CheckChain = %v, want ErrInvalid naming record 1", err)
	}
	// Reordering and renumbering: the prev links still break.
	l = newLedger(t)
	l.Entries[1], l.Entries[2] = l.Entries[2], l.Entries[1]
	l.Entries[1].Seq, l.Entries[2].Seq = 1, 2
	if err := l.CheckChain(); !errors.Is(err, manifests.ErrInvalid) || !strings.Contains(err.Error(), "record 1") {
		t.Errorf("reordered and renumbered: CheckChain = %v, want ErrInvalid naming record 1", err)
	}
	// Dropping a record in the middle.
	l = newLedger(t)
	l.Entries = append(l.Entries[:1], l.Entries[2:]...)
	if err := l.CheckChain(); !errors.Is(err, manifests.ErrInvalid) {
		t.Errorf("dropped record: CheckChain = %v, want ErrInvalid", err)
	}
	// Dropping the last record is not detectable by the chain alone.
	l = newLedger(t)
	l.Entries = l.Entries[:3]
	if err := l.CheckChain(); err != nil {
		t.Errorf("truncated ledger: CheckChain = %v", err)
	}
	// A second provision record, properly chained, is refused.
	l = newLedger(t)
	if err := l.Append(manifests.LedgerEntry{Action: manifests.LedgerProvision, Line: "demo", Version: "2.0.0"}); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckChain(); !errors.Is(err, manifests.ErrInvalid) || !strings.Contains(err.Error(), "record 4") || !strings.Contains(err.Error(), "provision") {
		t.Errorf("second provision: CheckChain = %v, want ErrInvalid naming record 4", err)
	}
	// A ledger must start with a provision.
	l = &manifests.Ledger{Schema: manifests.Schema, Kind: manifests.KindLedger}
	if err := l.CheckChain(); !errors.Is(err, manifests.ErrInvalid) {
		t.Errorf("empty ledger: CheckChain = %v", err)
	}
	if err := l.Append(manifests.LedgerEntry{Action: manifests.LedgerApply}); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckChain(); !errors.Is(err, manifests.ErrInvalid) {
		t.Errorf("ledger starting with apply: CheckChain = %v", err)
	}
	// Kind and schema.
	l = newLedger(t)
	l.Kind = manifests.KindImage
	if err := l.CheckChain(); !errors.Is(err, manifests.ErrInvalid) {
		t.Errorf("wrong kind: CheckChain = %v", err)
	}
	l = newLedger(t)
	l.Schema = 2
	if err := l.CheckChain(); !errors.Is(err, manifests.ErrInvalid) {
		t.Errorf("wrong schema: CheckChain = %v", err)
	}
}

// Every field of a record that reaches a path, a command line or a plan
// is checked when the ledger is read: a ledger is node state, and node
// state may have been planted. Each hostile record is re-chained, so only
// the field itself can be what CheckChain refuses.
func TestLedgerCheckChainFields(t *testing.T) {
	for name, spoil := range map[string]func(*manifests.LedgerEntry){
		"unknown action":         func(e *manifests.LedgerEntry) { e.Action = "erase" },
		"empty line":             func(e *manifests.LedgerEntry) { e.Line = "" },
		"line with a slash":      func(e *manifests.LedgerEntry) { e.Line = "../demo" },
		"version with traversal": func(e *manifests.LedgerEntry) { e.Version = "../../../etc/passwd" },
		"version with a slash":   func(e *manifests.LedgerEntry) { e.Version = "1.0.1/x" },
		"digest not sha256":      func(e *manifests.LedgerEntry) { e.Digest = "md5:00" },
		"head version":           func(e *manifests.LedgerEntry) { e.Head.Version = "v1.0.1" },
		"head digest":            func(e *manifests.LedgerEntry) { e.Head.Digest = "" },
		"image version":          func(e *manifests.LedgerEntry) { e.Image = "1.0" },
		"tree digest":            func(e *manifests.LedgerEntry) { e.TreeDigest = "sha256:zz" },
		"pending unit option": func(e *manifests.LedgerEntry) {
			e.Pending = []manifests.ServiceAction{sa("--host=evil", manifests.ActionRestart, false)}
		},
		"pending unit shell": func(e *manifests.LedgerEntry) {
			e.Pending = []manifests.ServiceAction{sa("$(reboot).service", manifests.ActionRestart, false)}
		},
		"pending unit traversal": func(e *manifests.LedgerEntry) {
			e.Pending = []manifests.ServiceAction{sa("../x.service", manifests.ActionRestart, false)}
		},
		"pending unit empty": func(e *manifests.LedgerEntry) {
			e.Pending = []manifests.ServiceAction{sa("", manifests.ActionRestart, false)}
		},
		"pending unknown action": func(e *manifests.LedgerEntry) { e.Pending = []manifests.ServiceAction{sa("a.service", "kill", false)} },
		"reboot unit": func(e *manifests.LedgerEntry) {
			e.Reboot = []manifests.ServiceAction{sa("a b.service", manifests.ActionRestart, false)}
		},
		"done unit": func(e *manifests.LedgerEntry) {
			e.Done = []manifests.ServiceAction{sa("-x.service", "try-restart", false)}
		},
		"done verb with a space": func(e *manifests.LedgerEntry) {
			e.Done = []manifests.ServiceAction{sa("a.service", "try-restart now", false)}
		},
		"done verb empty": func(e *manifests.LedgerEntry) { e.Done = []manifests.ServiceAction{sa("a.service", "", false)} },
		"layer format": func(e *manifests.LedgerEntry) {
			e.Layer = layer(func(li *manifests.LayerImage) { li.Format = "squashfs" })
		},
		"layer digest": func(e *manifests.LedgerEntry) {
			e.Layer = layer(func(li *manifests.LayerImage) { li.SHA256 = "sha256:" + li.SHA256[7:] })
		},
		"layer no blocks": func(e *manifests.LedgerEntry) { e.Layer = layer(func(li *manifests.LayerImage) { li.DataBlocks = 0 }) },
		"layer no tree": func(e *manifests.LedgerEntry) {
			e.Layer = layer(func(li *manifests.LayerImage) { li.Size = li.DataBlocks * 4096 })
		},
		"layer odd size": func(e *manifests.LedgerEntry) { e.Layer = layer(func(li *manifests.LayerImage) { li.Size += 1 }) },
		"layer salt":     func(e *manifests.LedgerEntry) { e.Layer = layer(func(li *manifests.LayerImage) { li.Salt = "XY" }) },
		"layer root hash": func(e *manifests.LedgerEntry) {
			e.Layer = layer(func(li *manifests.LayerImage) { li.RootHash = li.RootHash[:62] })
		},
		"layer on a rollback record": func(e *manifests.LedgerEntry) {
			e.Action, e.Layer = manifests.LedgerRollback, layer(func(*manifests.LayerImage) {})
		},
	} {
		l := newLedger(t)
		bad := rec(manifests.LedgerApply, "1.0.3")
		spoil(&bad)
		if err := l.Append(bad); err != nil {
			t.Fatal(err)
		}
		if err := l.CheckChain(); !errors.Is(err, manifests.ErrInvalid) || !strings.Contains(err.Error(), "record 4") {
			t.Errorf("%s: CheckChain = %v, want ErrInvalid naming record 4", name, err)
		}
	}
	// What a node records of its own restarts passes: verbs, and
	// daemon-reload or daemon-reexec without a unit.
	l := newLedger(t)
	ok := rec(manifests.LedgerRestart, "1.0.1")
	ok.Done = []manifests.ServiceAction{sa("", "daemon-reexec", false), sa("getty@tty1.service", "try-restart", false), sa("nginx.service", "reload-or-try-restart", false)}
	ok.Pending = []manifests.ServiceAction{sa("dbus.service", manifests.ActionRestart, true)}
	if err := l.Append(ok); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckChain(); err != nil {
		t.Errorf("CheckChain on a ledger with a node's own restart record: %v", err)
	}
	// An apply's record of the layer image it wrote passes.
	withLayer := rec(manifests.LedgerApply, "1.0.3")
	withLayer.Layer = layer(func(*manifests.LayerImage) {})
	if err := l.Append(withLayer); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckChain(); err != nil {
		t.Errorf("CheckChain on an apply record with its layer image: %v", err)
	}
}

// layer returns a valid record of a layer image, changed by edit.
func layer(edit func(*manifests.LayerImage)) *manifests.LayerImage {
	li := &manifests.LayerImage{Format: manifests.LayerFormatEROFS, SHA256: strings.Repeat("ab", 32), Size: 5 * 4096,
		DataBlocks: 4, Salt: strings.Repeat("01", 32), RootHash: strings.Repeat("cd", 32)}
	edit(li)
	return li
}

func versions(es []manifests.LedgerEntry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.Version)
	}
	return out
}

func TestLedgerApplied(t *testing.T) {
	l := newLedger(t)
	if got := versions(l.Applied()); !reflect.DeepEqual(got, []string{"1.0.1"}) {
		t.Fatalf("Applied() = %v, want [1.0.1]", got)
	}
	app := func(v string) {
		if err := l.Append(rec(manifests.LedgerApply, v)); err != nil {
			t.Fatal(err)
		}
	}
	rb := func(v string) {
		if err := l.Append(rec(manifests.LedgerRollback, v)); err != nil {
			t.Fatal(err)
		}
	}
	app("1.0.2")
	app("1.0.3")
	if err := l.Append(rec(manifests.LedgerRestart, "1.0.3")); err != nil {
		t.Fatal(err)
	}
	if got := versions(l.Applied()); !reflect.DeepEqual(got, []string{"1.0.1", "1.0.2", "1.0.3"}) {
		t.Fatalf("Applied() = %v", got)
	}
	rb("1.0.3")
	rb("1.0.2")
	rb("1.0.1")
	if got := l.Applied(); len(got) != 0 {
		t.Fatalf("Applied() after rolling back everything = %v", versions(got))
	}
	// A stray rollback with nothing applied does not panic or go negative.
	rb("1.0.0")
	app("1.0.1")
	if got := versions(l.Applied()); !reflect.DeepEqual(got, []string{"1.0.1"}) {
		t.Fatalf("Applied() = %v, want [1.0.1]", got)
	}
	if err := l.CheckChain(); err != nil {
		t.Fatal(err)
	}
}

func sa(unit string, a manifests.Action, dr bool, because ...string) manifests.ServiceAction {
	return manifests.ServiceAction{Unit: unit, Action: a, DaemonReload: dr, Because: because}
}

func TestLedgerPendingRestarts(t *testing.T) {
	const (
		restart = manifests.ActionRestart
		reload  = manifests.ActionReload
	)
	type rec struct{ pending, done []manifests.ServiceAction }
	tests := []struct {
		name string
		recs []rec
		want []manifests.ServiceAction
	}{
		{"nothing", nil, []manifests.ServiceAction{}},
		{"pending stays", []rec{{pending: []manifests.ServiceAction{sa("b.service", reload, false, "etc/b"), sa("a.service", restart, false, "etc/a")}}},
			[]manifests.ServiceAction{sa("a.service", restart, false, "etc/a"), sa("b.service", reload, false, "etc/b")}},
		{"restart settles restart", []rec{{pending: []manifests.ServiceAction{sa("a.service", restart, false, "x")}}, {done: []manifests.ServiceAction{sa("a.service", restart, false)}}},
			[]manifests.ServiceAction{}},
		{"restart settles reload", []rec{{pending: []manifests.ServiceAction{sa("a.service", reload, false, "x")}}, {done: []manifests.ServiceAction{sa("a.service", restart, false)}}},
			[]manifests.ServiceAction{}},
		{"reload settles reload", []rec{{pending: []manifests.ServiceAction{sa("a.service", reload, false, "x")}}, {done: []manifests.ServiceAction{sa("a.service", reload, false)}}},
			[]manifests.ServiceAction{}},
		{"reload does not settle restart", []rec{{pending: []manifests.ServiceAction{sa("a.service", restart, false, "x")}}, {done: []manifests.ServiceAction{sa("a.service", reload, false)}}},
			[]manifests.ServiceAction{sa("a.service", restart, false, "x")}},
		{"restart without daemon-reload does not settle daemon-reload", []rec{{pending: []manifests.ServiceAction{sa("a.service", restart, true, "u")}}, {done: []manifests.ServiceAction{sa("a.service", restart, false)}}},
			[]manifests.ServiceAction{sa("a.service", restart, true, "u")}},
		{"restart with daemon-reload settles", []rec{{pending: []manifests.ServiceAction{sa("a.service", restart, true, "u")}}, {done: []manifests.ServiceAction{sa("a.service", restart, true)}}},
			[]manifests.ServiceAction{}},
		{"pending reload then restart merge to restart", []rec{
			{pending: []manifests.ServiceAction{sa("a.service", reload, false, "y")}},
			{pending: []manifests.ServiceAction{sa("a.service", restart, false, "x")}},
			{done: []manifests.ServiceAction{sa("a.service", reload, false)}},
		}, []manifests.ServiceAction{sa("a.service", restart, false, "x", "y")}},
		{"done for another unit", []rec{{pending: []manifests.ServiceAction{sa("a.service", reload, false, "x")}}, {done: []manifests.ServiceAction{sa("b.service", restart, false)}}},
			[]manifests.ServiceAction{sa("a.service", reload, false, "x")}},
		{"done before pending does not settle it", []rec{{done: []manifests.ServiceAction{sa("a.service", restart, false)}}, {pending: []manifests.ServiceAction{sa("a.service", reload, false, "x")}}},
			[]manifests.ServiceAction{sa("a.service", reload, false, "x")}},
	}
	for _, tt := range tests {
		l := &manifests.Ledger{Schema: manifests.Schema, Kind: manifests.KindLedger}
		if err := l.Append(manifests.LedgerEntry{Action: manifests.LedgerProvision}); err != nil {
			t.Fatal(err)
		}
		for _, r := range tt.recs {
			action := manifests.LedgerApply
			if r.done != nil {
				action = manifests.LedgerRestart
			}
			if err := l.Append(manifests.LedgerEntry{Action: action, Pending: r.pending, Done: r.done}); err != nil {
				t.Fatal(err)
			}
		}
		got := l.PendingRestarts()
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: PendingRestarts() = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestMergeAction(t *testing.T) {
	got := manifests.MergeAction(manifests.ServiceAction{}, sa("a.service", manifests.ActionReload, false, "b"))
	if !reflect.DeepEqual(got, sa("a.service", manifests.ActionReload, false, "b")) {
		t.Fatalf("MergeAction(zero, b) = %+v", got)
	}
	got = manifests.MergeAction(sa("a.service", manifests.ActionRestart, true, "z", "a"), sa("a.service", manifests.ActionReload, false, "a", "m"))
	want := sa("a.service", manifests.ActionRestart, true, "a", "m", "z")
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("MergeAction = %+v, want %+v", got, want)
	}
	got = manifests.MergeAction(sa("a.service", manifests.ActionReload, false, "x"), sa("a.service", manifests.ActionRestart, false, "y"))
	if got.Action != manifests.ActionRestart {
		t.Fatalf("reload merged with restart = %s, want restart", got.Action)
	}
}

// Text a record quotes (an error, a reason) reads back exactly as it was
// hashed: RecordText makes it valid UTF-8 and cuts it at a character,
// and a record with invalid UTF-8 is refused, not written to break the
// chain.
func TestLedgerRecordText(t *testing.T) {
	long := strings.Repeat("x", manifests.MaxRecordText-2) + "● unit failed"
	for _, raw := range []string{long, "bad \xff\xfe bytes", "plain"} {
		text := manifests.RecordText(raw)
		if len(text) > manifests.MaxRecordText || !utf8.ValidString(text) {
			t.Errorf("RecordText(%.20q...) = %d bytes, valid %v", raw, len(text), utf8.ValidString(text))
		}
		l := newLedger(t)
		r := rec(manifests.LedgerRestart, "1.0.1")
		r.Error = text
		r.Pending = []manifests.ServiceAction{{Unit: "app.service", Action: manifests.ActionRestart, Because: []string{text}}}
		if err := l.Append(r); err != nil {
			t.Fatal(err)
		}
		b, err := manifests.Encode(l)
		if err != nil {
			t.Fatal(err)
		}
		var back manifests.Ledger
		if err := manifests.Decode(b, &back); err != nil {
			t.Fatal(err)
		}
		if err := back.CheckChain(); err != nil {
			t.Errorf("a record quoting %.20q... does not read back: %v", raw, err)
		}
	}
	l := newLedger(t)
	r := rec(manifests.LedgerRestart, "1.0.1")
	r.Error = "bad \xff"
	if err := l.Append(r); err == nil {
		t.Error("appended a record whose error is not UTF-8")
	}
}
