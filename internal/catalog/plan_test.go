package catalog

import (
	"reflect"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

func planCatalog() manifests.Catalog {
	return manifests.Catalog{Services: []manifests.Service{
		{
			Unit:        "db.service",
			UnitFiles:   []string{"usr/lib/systemd/system/db.service"},
			Binaries:    []string{"usr/bin/db"},
			Libraries:   []string{"lib/libc.so.6", "lib/libdb.so.1"},
			Paths:       []string{"etc/db"},
			ReloadPaths: []string{"etc/db/reload.d"},
		},
		{
			Unit:        "web.service",
			UnitFiles:   []string{"etc/systemd/system/web.service", "etc/systemd/system/web.service.d/x.conf"},
			Binaries:    []string{"usr/bin/web"},
			Libraries:   []string{"lib/libc.so.6"},
			Paths:       []string{"etc/web/web.conf"},
			ReloadPaths: []string{"etc/web", "srv/www"},
		},
	}}
}

func TestPlan(t *testing.T) {
	restart, reload := manifests.ActionRestart, manifests.ActionReload
	tests := []struct {
		name          string
		changed       []string
		wantActions   []manifests.ServiceAction
		wantUnclaimed []string
	}{
		{"nothing", nil, nil, nil},
		{
			"unit file means daemon-reload and restart",
			[]string{"etc/systemd/system/web.service.d/x.conf"},
			[]manifests.ServiceAction{{Unit: "web.service", Action: restart, DaemonReload: true, Because: []string{"etc/systemd/system/web.service.d/x.conf"}}},
			nil,
		},
		{
			"shared library restarts both",
			[]string{"lib/libc.so.6"},
			[]manifests.ServiceAction{
				{Unit: "db.service", Action: restart, Because: []string{"lib/libc.so.6"}},
				{Unit: "web.service", Action: restart, Because: []string{"lib/libc.so.6"}},
			},
			nil,
		},
		{
			"binary equality, not prefix",
			[]string{"usr/bin/db", "usr/bin/dbx", "usr/bin/db/x"},
			[]manifests.ServiceAction{{Unit: "db.service", Action: restart, Because: []string{"usr/bin/db"}}},
			[]string{"usr/bin/db/x", "usr/bin/dbx"},
		},
		{
			"reload paths",
			[]string{"srv/www/index.html", "etc/web/site.conf", "srv/wwwx"},
			[]manifests.ServiceAction{{Unit: "web.service", Action: reload, Because: []string{"etc/web/site.conf", "srv/www/index.html"}}},
			[]string{"srv/wwwx"},
		},
		{
			"restart wins over reload within the same unit",
			[]string{"etc/web/site.conf", "etc/web/web.conf"},
			[]manifests.ServiceAction{{Unit: "web.service", Action: restart, Because: []string{"etc/web/site.conf", "etc/web/web.conf"}}},
			nil,
		},
		{
			"nested reload path inside a restart path restarts",
			[]string{"etc/db/reload.d/a"},
			[]manifests.ServiceAction{{Unit: "db.service", Action: restart, Because: []string{"etc/db/reload.d/a"}}},
			nil,
		},
		{
			"directory itself and deduplication",
			[]string{"etc/db", "etc/db", "zz", "aa", "zz"},
			[]manifests.ServiceAction{{Unit: "db.service", Action: restart, Because: []string{"etc/db"}}},
			[]string{"aa", "zz"},
		},
		{
			"merge keeps daemon-reload",
			[]string{"srv/www/a", "etc/systemd/system/web.service", "usr/lib/systemd/system/db.service", "etc/db/x"},
			[]manifests.ServiceAction{
				{Unit: "db.service", Action: restart, DaemonReload: true, Because: []string{"etc/db/x", "usr/lib/systemd/system/db.service"}},
				{Unit: "web.service", Action: restart, DaemonReload: true, Because: []string{"etc/systemd/system/web.service", "srv/www/a"}},
			},
			nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			acts, left := Plan(planCatalog(), tt.changed)
			if !reflect.DeepEqual(acts, tt.wantActions) {
				t.Errorf("actions = %+v\nwant %+v", acts, tt.wantActions)
			}
			if !reflect.DeepEqual(left, tt.wantUnclaimed) {
				t.Errorf("unclaimed = %q, want %q", left, tt.wantUnclaimed)
			}
			// The same input in reverse order gives the same plan.
			rev := make([]string, len(tt.changed))
			for i, p := range tt.changed {
				rev[len(rev)-1-i] = p
			}
			acts2, left2 := Plan(planCatalog(), rev)
			if !reflect.DeepEqual(acts, acts2) || !reflect.DeepEqual(left, left2) {
				t.Errorf("plan depends on input order: %+v %q vs %+v %q", acts, left, acts2, left2)
			}
		})
	}
}

// TestPlanFromBuild runs Plan on a built catalog.
func TestPlanFromBuild(t *testing.T) {
	cat, err := Build(demoTree(), nil)
	if err != nil {
		t.Fatal(err)
	}
	acts, left := Plan(cat, []string{
		"usr/bin/dash",           // web's ExecStartPre script interpreter
		"etc/demo/vhosts/a.conf", // web reload path (X-Strata-Reload-Paths in a drop-in)
		"usr/lib/systemd/system/job.service",
		"usr/bin/python3.12",
		"etc/systemd/system/masked.service",
	})
	want := []manifests.ServiceAction{
		{Unit: "job.service", Action: manifests.ActionRestart, DaemonReload: true, Because: []string{"usr/bin/python3.12", "usr/lib/systemd/system/job.service"}},
		{Unit: "web.service", Action: manifests.ActionRestart, Because: []string{"etc/demo/vhosts/a.conf", "usr/bin/dash"}},
	}
	if !reflect.DeepEqual(acts, want) {
		t.Errorf("actions = %+v\nwant %+v", acts, want)
	}
	if wantLeft := []string{"etc/systemd/system/masked.service"}; !reflect.DeepEqual(left, wantLeft) {
		t.Errorf("unclaimed = %q, want %q", left, wantLeft)
	}
}
