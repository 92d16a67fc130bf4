package manifests_test

import (
	"testing"

	"github.com/strata-dev/strata/manifests"
)

// Restart debt is ordered: a unit to be stopped that comes back (a
// rollback of its removal) must be restarted, and a later removal wins.
func TestPendingRestartsFollowOrder(t *testing.T) {
	stop := manifests.ServiceAction{Unit: "a.service", Action: manifests.ActionStop, DaemonReload: true, Because: []string{"x"}}
	restart := manifests.ServiceAction{Unit: "a.service", Action: manifests.ActionRestart, DaemonReload: true, Because: []string{"y"}}
	reload := manifests.ServiceAction{Unit: "a.service", Action: manifests.ActionReload, Because: []string{"z"}}
	for _, tt := range []struct {
		name  string
		order []manifests.ServiceAction
		want  manifests.Action
	}{
		{"stop then restart", []manifests.ServiceAction{stop, restart}, manifests.ActionRestart},
		{"stop then reload", []manifests.ServiceAction{stop, reload}, manifests.ActionRestart},
		{"restart then stop", []manifests.ServiceAction{restart, stop}, manifests.ActionStop},
		{"reload then restart", []manifests.ServiceAction{reload, restart}, manifests.ActionRestart},
		{"restart then reload", []manifests.ServiceAction{restart, reload}, manifests.ActionRestart},
	} {
		l := &manifests.Ledger{Schema: manifests.Schema, Kind: manifests.KindLedger}
		if err := l.Append(manifests.LedgerEntry{Action: manifests.LedgerProvision}); err != nil {
			t.Fatal(err)
		}
		for _, a := range tt.order {
			if err := l.Append(manifests.LedgerEntry{Action: manifests.LedgerApply, Pending: []manifests.ServiceAction{a}}); err != nil {
				t.Fatal(err)
			}
		}
		got := l.PendingRestarts()
		if len(got) != 1 || got[0].Action != tt.want {
			t.Errorf("%s: pending %+v, want one %s", tt.name, got, tt.want)
		}
	}
}
