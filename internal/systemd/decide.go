package systemd

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/strata-dev/strata/manifests"
)

// decide returns why group g is not acted on, if it is not.
func decide(g *group, names []string, never []*regexp.Regexp) (Reason, string, bool) {
	u := g.unit
	if !u.Active() {
		if u.LoadState != "" && u.LoadState != "loaded" && u.ActiveState == "inactive" {
			return ReasonNotLoaded, "load state " + u.LoadState, true
		}
		return ReasonInactive, u.ActiveState + " (" + u.SubState + ")", true
	}
	if g.action != manifests.ActionStop && !g.config && !u.Running() {
		return ReasonNoProcess, fmt.Sprintf("%s (%s), type %s, no main process; only programs or libraries changed", u.ActiveState, u.SubState, u.Type), true
	}
	if !strings.HasSuffix(u.ID, ".service") {
		return ReasonUnitType, "only services are acted on live", true
	}
	if re, name := neverRestart(names, never); re != nil {
		return ReasonNeverRestart, fmt.Sprintf("%s matches %s; reboot required", name, re), true
	}
	if u.RefuseManualStart || u.RefuseManualStop {
		return ReasonRefuseManual, "RefuseManualStart/RefuseManualStop is set; reboot required", true
	}
	if g.action != manifests.ActionStop && u.LoadState != "loaded" {
		return ReasonLoadState, "load state " + u.LoadState + "; reboot required", true
	}
	return "", "", false
}

// catalogEntry returns the catalog service of a plan name, or of its
// template.
func catalogEntry(svc map[string]*manifests.Service, name string) *manifests.Service {
	if s := svc[name]; s != nil {
		return s
	}
	if t, ok := Template(name); ok {
		return svc[t]
	}
	return nil
}

// hasConfigCause reports whether a cause is not a binary or library of s:
// a unit file, a declared path, or a path the catalog does not explain.
func hasConfigCause(s *manifests.Service, because []string) bool {
	if s == nil {
		return len(because) > 0
	}
	code := map[string]bool{}
	for _, p := range s.Binaries {
		code[p] = true
	}
	for _, p := range s.Libraries {
		code[p] = true
	}
	for _, p := range because {
		if !code[p] || declared(s, p) {
			return true
		}
	}
	return false
}

func declared(s *manifests.Service, p string) bool {
	for _, list := range [][]string{s.UnitFiles, s.Paths, s.ReloadPaths} {
		for _, d := range list {
			if manifests.Within(p, d) {
				return true
			}
		}
	}
	return false
}

// mergeAction: stop wins over restart, restart over reload.
func mergeAction(a, b manifests.Action) manifests.Action {
	rank := map[manifests.Action]int{manifests.ActionReload: 1, manifests.ActionRestart: 2, manifests.ActionStop: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

func verbFor(a manifests.Action) Verb {
	switch a {
	case manifests.ActionStop:
		return VerbStop
	case manifests.ActionReload:
		return VerbTryReloadOrRestart
	}
	return VerbTryRestart
}
