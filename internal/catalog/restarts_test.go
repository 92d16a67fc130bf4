package catalog_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

func TestChangedPathsAndSettle(t *testing.T) {
	before := tree.State{
		"etc":                                   {Path: "etc", Type: manifests.TypeDir},
		"etc/app":                               {Path: "etc/app", Type: manifests.TypeDir},
		"etc/app/a.conf":                        {Path: "etc/app/a.conf", Type: manifests.TypeFile},
		"usr/lib/systemd/system/old.service":    {Path: "usr/lib/systemd/system/old.service", Type: manifests.TypeFile},
		"usr/lib/systemd/system/getty@.service": {Path: "usr/lib/systemd/system/getty@.service", Type: manifests.TypeFile},
	}
	// etc/app, a directory, becomes a file: what was below it changed too.
	m := &manifests.OverlayManifest{Entries: []manifests.Entry{{Path: "etc/app", Type: manifests.TypeFile}}, Deletes: []string{"usr/lib/systemd/system/old.service"}}
	got := catalog.ChangedPaths(m, before)
	want := []string{"etc/app", "etc/app/a.conf", "usr/lib/systemd/system/old.service"}
	if !slices.Equal(got, want) {
		t.Errorf("ChangedPaths = %q, want %q", got, want)
	}
	if !catalog.TouchesUnits(got) || catalog.TouchesUnits([]string{"etc/app/a.conf", "etc/systemd/systemd.conf"}) {
		t.Error("TouchesUnits: want true for a unit file only")
	}

	after := tree.State{"usr/lib/systemd/system/getty@.service": before["usr/lib/systemd/system/getty@.service"]}
	acts := catalog.Settle([]manifests.ServiceAction{
		{Unit: "old.service", Action: manifests.ActionRestart},        // its unit file went: stop
		{Unit: "getty@tty1.service", Action: manifests.ActionRestart}, // through its template: stays
		{Unit: "elsewhere.service", Action: manifests.ActionReload},   // not in the tree: left alone
	}, before, after)
	if acts[0].Action != manifests.ActionStop || !acts[0].DaemonReload || acts[1].Action != manifests.ActionRestart || acts[2].Action != manifests.ActionReload {
		t.Errorf("Settle = %+v", acts)
	}
}

func TestCheckUnits(t *testing.T) {
	cat := manifests.Catalog{Services: []manifests.Service{{Unit: "demo-web.service", Paths: []string{"etc/demo"}}, {Unit: "getty@.service"}}}
	for _, c := range []struct {
		units []string
		any   bool
		ok    bool
	}{
		{[]string{"demo-web.service"}, false, true},
		{[]string{"getty@tty1.service"}, false, true},
		{[]string{"getty@.service"}, false, false},
		{[]string{"demo-wbe.service"}, false, false},
		{[]string{"outside.service"}, true, true},
		{[]string{"not a unit"}, true, false},
	} {
		err := catalog.CheckUnits(cat, c.units, "--restart", c.any)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, catalog.ErrNotInCatalog) {
			t.Errorf("CheckUnits(%q, any %v) = %v, want ok %v", c.units, c.any, err, c.ok)
		}
	}
	if err := catalog.CheckUnits(cat, []string{"demo-wbe.service"}, "--restart", false); err == nil || !strings.Contains(err.Error(), "did you mean demo-web.service") {
		t.Errorf("a typo: %v, want the nearest unit named", err)
	}
	// A service's bare name: the suggestion is the catalog's unit, not a
	// generic example; so for a unit the node restarts.
	if err := catalog.CheckUnits(cat, []string{"demo-web"}, "--restart", false); err == nil || !strings.Contains(err.Error(), `--restart "demo-web": not a systemd unit name; did you mean demo-web.service?`) {
		t.Errorf("a bare service name: %v, want demo-web.service suggested", err)
	}
	if err := catalog.KnownUnits(cat, []string{"demo-web"}); !errors.Is(err, catalog.ErrNotInCatalog) || !strings.Contains(err.Error(), "did you mean demo-web.service?") {
		t.Errorf("KnownUnits of a bare service name: %v, want demo-web.service suggested", err)
	}
	if got := catalog.Managed(cat); !slices.Equal(got, []string{"demo-web.service"}) {
		t.Errorf("Managed = %q", got)
	}
}
