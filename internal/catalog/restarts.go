package catalog

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/strata-dev/strata/internal/suggest"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// This file is the restart planning the publisher (overlay create, which
// records a plan) and the node engine (apply and rollback, which merge
// the recorded plan with their own) share.

// ErrNotInCatalog reports a unit asked for (a restart, an overlay's
// --restart) that the catalog does not have.
var ErrNotInCatalog = errors.New("unit not in the catalog")

// ChangedPaths lists every path an overlay changes in the tree before it:
// its entries, its deletes and everything below them, and the contents of
// directories it replaces with something else. Sorted.
func ChangedPaths(m *manifests.OverlayManifest, before tree.State) []string {
	var out []string
	gone := append([]string{}, m.Deletes...)
	for _, e := range m.Entries {
		out = append(out, e.Path)
		if old, ok := before[e.Path]; ok && old.Type == manifests.TypeDir && e.Type != manifests.TypeDir {
			gone = append(gone, e.Path)
		}
	}
	out = append(out, m.Deletes...)
	for _, d := range gone {
		for p := range before {
			if p != d && manifests.Within(p, d) {
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Settle fits each action to what the change did to its unit: a unit
// whose definition the change removed is stopped (after a daemon-reload),
// not restarted, and a unit it brought back (a rollback of a removal) is
// restarted, not stopped. Units defined outside the tree are left alone.
func Settle(actions []manifests.ServiceAction, before, after tree.State) []manifests.ServiceAction {
	out := make([]manifests.ServiceAction, 0, len(actions))
	for _, a := range actions {
		was, is := unitPresent(before, a.Unit), unitPresent(after, a.Unit)
		switch {
		case was && !is:
			a.Action, a.DaemonReload = manifests.ActionStop, true
		case is && a.Action == manifests.ActionStop:
			a.Action, a.DaemonReload = manifests.ActionRestart, true
		}
		out = append(out, a)
	}
	return out
}

// unitPresent reports whether state defines unit in one of the unit
// directories, directly or, for an instance such as getty@tty1.service,
// through its template (a symlink to /dev/null masks it).
func unitPresent(state tree.State, unit string) bool {
	names := []string{unit}
	if t := TemplateOf(unit); t != "" {
		names = append(names, t)
	}
	for _, name := range names {
		for _, d := range unitDirs {
			if e, ok := state[d+"/"+name]; ok {
				return !(e.Type == manifests.TypeSymlink && e.Target == "/dev/null")
			}
		}
	}
	return false
}

// TouchesUnits reports whether a path lies in a unit directory.
func TouchesUnits(paths []string) bool {
	for _, p := range paths {
		for _, d := range unitDirs {
			if strings.HasPrefix(p, d+"/") {
				return true
			}
		}
	}
	return false
}

// MergeActions merges two plans, one action per unit, sorted.
func MergeActions(a, b []manifests.ServiceAction) []manifests.ServiceAction {
	byUnit := map[string]manifests.ServiceAction{}
	for _, x := range append(append([]manifests.ServiceAction{}, a...), b...) {
		byUnit[x.Unit] = manifests.MergeAction(byUnit[x.Unit], x)
	}
	out := make([]manifests.ServiceAction, 0, len(byUnit))
	for _, x := range byUnit {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Unit < out[j].Unit })
	return out
}

// StillUnclaimed returns the paths of unclaimed that no action of claimed
// names as its cause.
func StillUnclaimed(unclaimed []string, claimed []manifests.ServiceAction) []string {
	seen := map[string]bool{}
	for _, a := range claimed {
		for _, p := range a.Because {
			seen[p] = true
		}
	}
	var out []string
	for _, p := range unclaimed {
		if !seen[p] {
			out = append(out, p)
		}
	}
	return out
}

// Managed lists the services a catalog manages: those declared with
// paths, reload paths, a validate or a check command (recipe services or
// X-Strata-* unit keys), sorted as the catalog is.
func Managed(cat manifests.Catalog) []string {
	var out []string
	for _, s := range cat.Services {
		if len(s.Paths)+len(s.ReloadPaths)+len(s.Validate)+len(s.Check) > 0 {
			out = append(out, s.Unit)
		}
	}
	return out
}

// ServiceOf returns unit's catalog entry (zero if none).
func ServiceOf(cat manifests.Catalog, unit string) manifests.Service {
	for _, s := range cat.Services {
		if s.Unit == unit {
			return s
		}
	}
	return manifests.Service{}
}

// KnownUnits refuses, with ErrNotInCatalog, a unit cat does not have.
func KnownUnits(cat manifests.Catalog, units []string) error {
	for _, u := range units {
		if ServiceOf(cat, u).Unit == "" {
			return fmt.Errorf("%w: %s%s (strata status --root lists the node's units)", ErrNotInCatalog, u, didYouMean(cat, u))
		}
	}
	return nil
}

// didYouMean suggests the catalog's units closest to u ("" when none is
// close): u with ".service" added first, as a user who typed a service's
// name meant.
func didYouMean(cat manifests.Catalog, u string) string {
	if !strings.Contains(u, ".") && ServiceOf(cat, u+".service").Unit != "" {
		return "; did you mean " + u + ".service?"
	}
	near := nearestUnits(cat, u)
	if !strings.Contains(u, ".") {
		near = append(nearestUnits(cat, u+".service"), near...)
	}
	if len(near) == 0 {
		return ""
	}
	seen := map[string]bool{}
	var out []string
	for _, n := range near {
		if !seen[n] && len(out) < 2 {
			seen[n] = true
			out = append(out, n)
		}
	}
	return "; did you mean " + strings.Join(out, " or ") + "?"
}

// CheckUnits refuses, with ErrNotInCatalog, a unit of units (given with
// flag) that is no unit name, or, unless anyUnit, that cat does not have,
// itself or as an instance of a template unit it has, naming the closest
// units it does have: a typo must not reach every node as a restart that
// always fails.
func CheckUnits(cat manifests.Catalog, units []string, flag string, anyUnit bool) error {
	for _, u := range units {
		if !manifests.ValidUnit(u) || anyUnit && !unitTypes[u[strings.LastIndexByte(u, '.')+1:]] {
			hint := didYouMean(cat, u)
			if hint == "" {
				hint = " (such as " + exampleUnit(cat) + ")"
			}
			return fmt.Errorf("%s %q: not a systemd unit name%s: %w", flag, u, hint, ErrNotInCatalog)
		}
		if at := strings.IndexByte(u, '@'); at == 0 || at > 0 && u[at+1] == '.' {
			return fmt.Errorf("%s %s: a template (or no unit); name an instance, such as getty@tty1.service: %w", flag, u, ErrNotInCatalog)
		}
		if anyUnit || ServiceOf(cat, u).Unit != "" || ServiceOf(cat, TemplateOf(u)).Unit != "" {
			continue
		}
		msg := fmt.Sprintf("%s %s: the line's catalog has no such unit%s", flag, u, didYouMean(cat, u))
		return fmt.Errorf("%s (give --allow-unknown-unit if it comes from outside the image): %w", msg, ErrNotInCatalog)
	}
	return nil
}

// TemplateOf returns the template unit of an instance ("getty@tty1.service"
// -> "getty@.service"), or "" for a unit that is not one.
func TemplateOf(u string) string {
	at, dot := strings.IndexByte(u, '@'), strings.LastIndexByte(u, '.')
	if at <= 0 || dot < at {
		return ""
	}
	return u[:at+1] + u[dot:]
}

// unitTypes are the suffixes of systemd's unit types.
var unitTypes = map[string]bool{"service": true, "socket": true, "target": true, "timer": true, "mount": true, "automount": true,
	"path": true, "slice": true, "scope": true, "swap": true, "device": true}

// exampleUnit names a unit of the catalog, for a message's example.
func exampleUnit(cat manifests.Catalog) string {
	for _, s := range cat.Services {
		if strings.HasSuffix(s.Unit, ".service") && !strings.Contains(s.Unit, "@") {
			return s.Unit
		}
	}
	return "nginx.service"
}

// nearestUnits returns the catalog's units closest to u by edit distance
// (at most 3 edits), closest first, at most two.
func nearestUnits(cat manifests.Catalog, u string) []string {
	units := make([]string, 0, len(cat.Services))
	for _, s := range cat.Services {
		units = append(units, s.Unit)
	}
	return suggest.Nearest(u, units, 3, 2)
}
