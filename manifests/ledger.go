package manifests

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// LedgerAction is the kind of a ledger record.
type LedgerAction string

// The records a ledger holds.
const (
	// LedgerProvision starts every ledger: the node was made from an image.
	LedgerProvision LedgerAction = "provision"
	// LedgerApply records an applied overlay.
	LedgerApply LedgerAction = "apply"
	// LedgerRollback records that the last applied overlay was reverted.
	LedgerRollback LedgerAction = "rollback"
	// LedgerRestart records restarts carried out later to settle debt.
	LedgerRestart LedgerAction = "restart"
	// LedgerRepair records layers rebuilt from their overlays because
	// their files had drifted (restart --repair): the head is unchanged,
	// Repaired lists the layers' versions.
	LedgerRepair LedgerAction = "repair"
	// LedgerFailed records an overlay that was tried and taken back (its
	// services failed, or a crash interrupted it): the head is unchanged,
	// Error says what went wrong and Pending holds restarts still due.
	LedgerFailed LedgerAction = "failed"
	// LedgerUpgrade records a whole-image upgrade that booted and passed
	// its health check: Version and Digest name the new image, Slot the
	// root partition it is on, Layers the applied overlays that stay
	// stacked above it and Dropped those that do not (refused by its
	// constraints, with --drop-layers). Compact marks a regenerated image
	// that folds the line through Head (its tree is the line's tree).
	// A failed record with a Slot is an upgrade that never reached health.
	LedgerUpgrade LedgerAction = "upgrade"
	// LedgerRefused records a layer image that activation refused (it
	// did not match the record of its apply): Version and Digest name
	// the layer's overlay, Error says why; the head is unchanged, since
	// the ledger still holds the layer, and the stacks hold only the
	// layers below it until restart --repair rewrites it (a repair
	// record).
	LedgerRefused LedgerAction = "refused"
)

// Ledger is a node's append-only record of what was applied to it. Each
// record carries the hash of the one before it, so the file is a hash chain
// from the provisioning image.
type Ledger struct {
	Schema  int           `json:"schema"`
	Kind    string        `json:"kind"`
	Entries []LedgerEntry `json:"entries"`
}

// LedgerEntry is one record of a ledger.
type LedgerEntry struct {
	Seq    int          `json:"seq"`
	Action LedgerAction `json:"action"`
	Line   string       `json:"line"`
	// Version and Digest name the image (provision) or the overlay
	// (apply, rollback) the record is about.
	Version string `json:"version"`
	Digest  string `json:"digest"`
	// Image is the node's base image version, for image constraints.
	Image string `json:"image"`
	// Head is the node's head after this record: the last overlay in
	// effect, or the image.
	Head Ref `json:"head"`
	// TreeDigest is the node's tree digest after this record.
	TreeDigest string `json:"tree_digest"`
	// Pending are restarts that were due but not carried out.
	Pending []ServiceAction `json:"pending,omitempty"`
	// Done are restarts carried out (restart records).
	Done []ServiceAction `json:"done,omitempty"`
	// Error is why a failed record's overlay was taken back.
	Error string `json:"error,omitempty"`
	// Reboot are units a change touched that could not be restarted
	// safely on the running node (the bus, PID 1's own daemons, units
	// refusing manual restarts): they take the change at the next boot.
	Reboot []ServiceAction `json:"reboot,omitempty"`
	// Repaired are the layers a repair record rebuilt.
	Repaired []string `json:"repaired,omitempty"`
	// Overwrote are the paths an apply replaced or deleted although they
	// had been changed on the node (apply-overlay --force).
	Overwrote []string `json:"overwrote,omitempty"`
	// Slot is the root partition ("a" or "b") of an upgrade or of a
	// failed upgrade.
	Slot string `json:"slot,omitempty"`
	// Layers are the applied overlays an upgrade kept, oldest first;
	// Dropped those it took off.
	Layers  []string `json:"layers,omitempty"`
	Dropped []string `json:"dropped,omitempty"`
	// Compact marks an upgrade to a regenerated image of the node's head.
	Compact bool `json:"compact,omitempty"`
	// Layer is the layer image an apply on an overlayfs node wrote (nil
	// for a layer directory, or on another backend).
	Layer *LayerImage `json:"layer,omitempty"`
	// Signer is the id of the key whose signature on the overlay's
	// manifest was verified when it was applied (apply and failed
	// records of an overlay), so the history names it after the overlay
	// is rolled back and its manifest dropped.
	Signer string `json:"signer,omitempty"`
	// Offline marks a restart record made while the node was not
	// running (restart-pending --disk): nothing ran, and its Done
	// actions are what the next boot does, starting every service with
	// the node's tree.
	Offline bool   `json:"offline,omitempty"`
	Time    string `json:"time"`
	Prev    string `json:"prev"`
	Hash    string `json:"hash"`
}

// EntryHash returns the hash of e with its Hash field cleared.
func EntryHash(e LedgerEntry) (string, error) {
	e.Hash = ""
	b, err := Encode(e)
	if err != nil {
		return "", err
	}
	return Digest(b), nil
}

// Append adds e to the ledger, filling in Seq, Prev and Hash. A record
// that would not verify once read back (text that is not UTF-8, see
// RecordText) is refused.
func (l *Ledger) Append(e LedgerEntry) error {
	if err := e.checkText(); err != nil {
		return fmt.Errorf("%w: ledger record: %v", ErrInvalid, err)
	}
	e.Seq = len(l.Entries)
	e.Prev = ""
	if n := len(l.Entries); n > 0 {
		e.Prev = l.Entries[n-1].Hash
	}
	h, err := EntryHash(e)
	if err != nil {
		return err
	}
	e.Hash = h
	l.Entries = append(l.Entries, e)
	return nil
}

// Last returns the newest record. The ledger must not be empty.
func (l *Ledger) Last() LedgerEntry { return l.Entries[len(l.Entries)-1] }

// CheckChain verifies the ledger's structure: it starts with a provision
// record, sequence numbers count up, and every record's Prev and Hash are
// right. The error names the first broken record.
func (l *Ledger) CheckChain() error {
	if l.Schema != Schema || l.Kind != KindLedger {
		return fmt.Errorf("%w: not a ledger (schema %d, kind %q)", ErrInvalid, l.Schema, l.Kind)
	}
	if len(l.Entries) == 0 || l.Entries[0].Action != LedgerProvision {
		return fmt.Errorf("%w: ledger does not start with a provision record", ErrInvalid)
	}
	prev := ""
	for i, e := range l.Entries {
		if e.Seq != i {
			return fmt.Errorf("%w: ledger record %d has seq %d", ErrInvalid, i, e.Seq)
		}
		if e.Prev != prev {
			return fmt.Errorf("%w: ledger record %d does not link to record %d", ErrInvalid, i, i-1)
		}
		h, err := EntryHash(e)
		if err != nil {
			return err
		}
		if h != e.Hash {
			return fmt.Errorf("%w: ledger record %d was altered (hash %s, recorded %s)", ErrInvalid, i, h, e.Hash)
		}
		if i > 0 && e.Action == LedgerProvision {
			return fmt.Errorf("%w: ledger record %d is a second provision", ErrInvalid, i)
		}
		if err := e.validate(); err != nil {
			return fmt.Errorf("%w: ledger record %d: %v", ErrInvalid, i, err)
		}
		prev = e.Hash
	}
	return nil
}

// Validate checks a record as reading the ledger back will (CheckChain):
// a record that fails it must not be written, since it would make the
// ledger unreadable.
func (e LedgerEntry) Validate() error {
	if err := e.validate(); err != nil {
		return fmt.Errorf("%w: ledger record: %v", ErrInvalid, err)
	}
	return nil
}

// validate checks the fields of a record that reach paths, command lines
// and plans: a ledger is node state, and node state may have been planted.
func (e LedgerEntry) validate() error {
	switch e.Action {
	case LedgerProvision, LedgerApply, LedgerRollback, LedgerRestart, LedgerRepair, LedgerFailed, LedgerUpgrade, LedgerRefused:
	default:
		return fmt.Errorf("unknown action %q", e.Action)
	}
	switch {
	case e.Slot != "" && e.Slot != SlotA && e.Slot != SlotB:
		return fmt.Errorf("slot %q is not %q or %q", e.Slot, SlotA, SlotB)
	case e.Action == LedgerUpgrade && e.Slot == "":
		return fmt.Errorf("upgrade record without a slot")
	case e.Action != LedgerUpgrade && e.Action != LedgerFailed && e.Slot != "":
		return fmt.Errorf("%s record with a slot", e.Action)
	case e.Action != LedgerUpgrade && (len(e.Layers) > 0 || len(e.Dropped) > 0 || e.Compact):
		return fmt.Errorf("%s record with upgrade fields", e.Action)
	case e.Signer != "" && !ValidKeyID(e.Signer):
		return fmt.Errorf("signer %q is not a key id", clip(e.Signer))
	case e.Signer != "" && e.Action != LedgerApply && e.Action != LedgerFailed:
		return fmt.Errorf("%s record with a signer", e.Action)
	case e.Offline && e.Action != LedgerRestart:
		return fmt.Errorf("%s record marked offline", e.Action)
	case len(e.Overwrote) > 0 && e.Action != LedgerApply:
		return fmt.Errorf("%s record with overwritten paths", e.Action)
	case e.Layer != nil && e.Action != LedgerApply:
		return fmt.Errorf("%s record with a layer image", e.Action)
	}
	if e.Layer != nil {
		if err := e.Layer.Validate(); err != nil {
			return err
		}
	}
	if err := e.checkText(); err != nil {
		return err
	}
	for _, p := range e.Overwrote {
		if err := ValidPath(p); err != nil {
			return fmt.Errorf("overwritten path: %w", err)
		}
	}
	if err := ValidLine(e.Line); err != nil {
		return err
	}
	for _, r := range []Ref{{Version: e.Version, Digest: e.Digest}, e.Head} {
		if _, err := ParseVersion(r.Version); err != nil {
			return err
		}
		if !ValidDigest(r.Digest) {
			return fmt.Errorf("digest %q is not a sha256 digest", r.Digest)
		}
	}
	if _, err := ParseVersion(e.Image); err != nil {
		return fmt.Errorf("image version: %w", err)
	}
	if !ValidDigest(e.TreeDigest) {
		return fmt.Errorf("tree digest %q is not a sha256 digest", e.TreeDigest)
	}
	for _, vs := range [][]string{e.Repaired, e.Layers, e.Dropped} {
		for _, v := range vs {
			if _, err := ParseVersion(v); err != nil {
				return fmt.Errorf("layer: %w", err)
			}
		}
	}
	for _, list := range []struct {
		name    string
		actions []ServiceAction
		plan    bool // plan actions, not the verbs a node carried out
	}{{"pending", e.Pending, true}, {"reboot", e.Reboot, true}, {"done", e.Done, false}} {
		for _, a := range list.actions {
			if err := a.validate(list.plan); err != nil {
				return fmt.Errorf("%s restart: %w", list.name, err)
			}
		}
	}
	return nil
}

// checkText refuses a record quoting text that is not UTF-8: encoded,
// it would not read back as the bytes its hash covers.
func (e LedgerEntry) checkText() error {
	if !utf8.ValidString(e.Error) {
		return fmt.Errorf("error text is not UTF-8")
	}
	for _, as := range [][]ServiceAction{e.Pending, e.Reboot, e.Done} {
		for _, a := range as {
			for _, b := range a.Because {
				if !utf8.ValidString(b) {
					return fmt.Errorf("the reason of %s is not UTF-8", a.Unit)
				}
			}
		}
	}
	return nil
}

// validate checks a recorded action: a plan action (restart, reload,
// stop, daemon-reload) on a valid unit, or, for what a node carried out,
// a systemctl verb on a valid unit or none (daemon-reload, daemon-reexec).
func (a ServiceAction) validate(plan bool) error {
	if plan {
		switch a.Action {
		case ActionRestart, ActionReload, ActionStop, ActionDaemonReload:
		default:
			return fmt.Errorf("unknown action %q", a.Action)
		}
		if !ValidUnit(a.Unit) {
			return fmt.Errorf("invalid unit name %q", a.Unit)
		}
		return nil
	}
	if a.Action == "" || len(a.Action) > 32 || strings.Trim(string(a.Action), "abcdefghijklmnopqrstuvwxyz-") != "" {
		return fmt.Errorf("unknown action %q", a.Action)
	}
	if a.Unit != "" && !ValidUnit(a.Unit) {
		return fmt.Errorf("invalid unit name %q", a.Unit)
	}
	return nil
}

// Applied returns the overlays in effect, oldest first: apply records
// minus those undone by later rollback records and those an upgrade did
// not keep.
func (l *Ledger) Applied() []LedgerEntry {
	var stack []LedgerEntry
	for _, e := range l.Entries {
		switch e.Action {
		case LedgerApply:
			stack = append(stack, e)
		case LedgerRollback:
			if n := len(stack); n > 0 {
				stack = stack[:n-1]
			}
		case LedgerUpgrade:
			var kept []LedgerEntry
			for _, a := range stack {
				if slices.Contains(e.Layers, a.Version) {
					kept = append(kept, a)
				}
			}
			stack = kept
		}
	}
	return stack
}

// Running returns the record of the image the node runs: its provision
// record or its last upgrade.
func (l *Ledger) Running() LedgerEntry {
	for i := len(l.Entries) - 1; i > 0; i-- {
		if l.Entries[i].Action == LedgerUpgrade {
			return l.Entries[i]
		}
	}
	return l.Entries[0]
}

// Canonical returns the record of the image whose tree is the line's
// tree at its head (the overlays' tree digests fold from it): the
// provision record or the last compacting upgrade. An upgrade to an
// image of a new recipe changes the node's tree, not the line's.
func (l *Ledger) Canonical() LedgerEntry {
	for i := len(l.Entries) - 1; i > 0; i-- {
		if e := l.Entries[i]; e.Action == LedgerUpgrade && e.Compact {
			return e
		}
	}
	return l.Entries[0]
}

// PendingRestarts returns the restart debt: actions recorded as pending
// and not settled by a later restart record, one per unit, sorted.
func (l *Ledger) PendingRestarts() []ServiceAction {
	due := map[string]ServiceAction{}
	for _, e := range l.Entries {
		for _, a := range e.Pending {
			due[a.Unit] = FollowAction(due[a.Unit], a)
		}
		for _, a := range e.Done {
			if d, ok := due[a.Unit]; ok && (a.Action == ActionRestart || a.Action == ActionStop || d.Action == a.Action) && (a.DaemonReload || !d.DaemonReload) {
				delete(due, a.Unit)
			}
		}
	}
	out := make([]ServiceAction, 0, len(due))
	for _, a := range due {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Unit < out[j].Unit })
	return out
}

// FollowAction combines an action due on a unit with one that became due
// later: a later stop wins, a later restart or reload of a unit that was
// to be stopped (it came back) becomes a restart, and otherwise the two
// merge as in MergeAction.
func FollowAction(a, b ServiceAction) ServiceAction {
	switch {
	case a.Unit == "":
		return b
	case b.Action == ActionStop:
		out := MergeAction(a, b)
		out.Action = ActionStop
		return out
	case a.Action == ActionStop:
		out := MergeAction(b, a)
		out.Action = ActionRestart
		return out
	}
	return MergeAction(a, b)
}

// MergeAction combines two actions on the same unit: restart beats reload,
// a daemon-reload need is kept, and the reasons are joined. A zero a yields
// b.
func MergeAction(a, b ServiceAction) ServiceAction {
	if a.Unit == "" {
		return b
	}
	out := a
	switch {
	case a.Action == ActionStop || b.Action == ActionStop:
		out.Action = ActionStop
	case b.Action == ActionRestart:
		out.Action = ActionRestart
	}
	out.DaemonReload = a.DaemonReload || b.DaemonReload
	seen := map[string]bool{}
	out.Because = nil
	for _, p := range append(append([]string{}, a.Because...), b.Because...) {
		if !seen[p] {
			seen[p] = true
			out.Because = append(out.Because, p)
		}
	}
	sort.Strings(out.Because)
	return out
}

// MaxRecordText bounds text a ledger record quotes (an error, a reason).
const MaxRecordText = 1000

// RecordText is s as a ledger record may quote it: valid UTF-8 (what is
// not becomes U+FFFD), at most MaxRecordText bytes, cut at a character
// boundary. A record must read back exactly as it was hashed.
func RecordText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxRecordText {
		return s
	}
	cut := MaxRecordText - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
